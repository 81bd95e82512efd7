package opwatch

import (
	"context"
	"sync"

	"github.com/coder/websocket"
	"go.uber.org/zap"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/engine/operations"
	"github.com/synclane/synclane/protocol/opwire"
	"github.com/synclane/synclane/protocol/syncerr"
)

// conn is one watch socket: its reader runs in ServeHTTP's goroutine,
// query runs in goroutines it owns (wg), all stopped by ctx.
type conn struct {
	hub *Hub
	eng *engine.Engine
	id  engine.Identity
	ws  *websocket.Conn

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	wmu    sync.Mutex // serializes writes

	mu      sync.Mutex
	watches map[string]*watch
	// draining counts unwatched watches whose run is still in flight: they
	// hold their slot of MaxWatches until the run returns.
	draining int
}

// watch is one registered watch. Its fields after tables are guarded by
// conn.mu.
type watch struct {
	id     string
	req    opwire.Request
	tables []string
	// ctx ends when the watch is removed (its run's query is cancelled).
	ctx    context.Context
	cancel context.CancelFunc

	seq     int64 // maxCommitSeq of the last snapshot sent
	running bool
	dirty   bool
	removed bool
}

func (c *conn) serve() {
	defer func() {
		c.cancel()
		c.wg.Wait()
		_ = c.ws.CloseNow()
	}()
	for {
		typ, data, err := c.ws.Read(c.ctx)
		if err != nil {
			return
		}
		if typ != websocket.MessageText {
			c.send(opwire.EncodeWatchError("", syncerr.New(syncerr.OperationInvalidRequest, "messages are text frames")))
			continue
		}
		m, err := opwire.DecodeWatchMessage(data)
		if err != nil {
			c.send(opwire.EncodeWatchError("", syncerr.As(err)))
			continue
		}
		if m.Kind == opwire.KindUnwatch {
			c.mu.Lock()
			if w := c.watches[m.WatchID]; w != nil {
				w.removed = true
				delete(c.watches, m.WatchID)
				w.cancel()
				if w.running {
					c.draining++ // released when the run returns
				}
			}
			c.mu.Unlock()
			continue
		}
		c.add(m)
	}
}

// add registers a watch and starts its first run.
func (c *conn) add(m *opwire.WatchMessage) {
	if len(m.WatchID) > operations.MaxIDBytes {
		c.send(opwire.EncodeWatchError("", syncerr.New(syncerr.OperationInvalidRequest, "watchId is longer than %d bytes", operations.MaxIDBytes)))
		return
	}
	tables, ok := c.eng.Operations().QueryTables(m.OperationID)
	if !ok {
		c.send(opwire.EncodeWatchError(m.WatchID, syncerr.New(syncerr.OperationUnknown, "no query %s is registered", syncerr.Quote(m.OperationID))))
		return
	}
	c.mu.Lock()
	if c.watches[m.WatchID] != nil {
		c.mu.Unlock()
		c.send(opwire.EncodeWatchError(m.WatchID, syncerr.New(syncerr.OperationInvalidRequest, "watch %s is already active on this connection", syncerr.Quote(m.WatchID))))
		return
	}
	if len(c.watches)+c.draining >= c.hub.opts.MaxWatches {
		c.mu.Unlock()
		c.send(opwire.EncodeWatchError(m.WatchID, syncerr.New(syncerr.OperationInvalidRequest,
			"a connection may hold at most %d watches (an unwatched one counts until its running query ends)", c.hub.opts.MaxWatches)))
		return
	}
	w := &watch{id: m.WatchID, tables: tables, seq: -1, req: opwire.Request{Kind: opwire.KindQuery, ClientID: m.ClientID,
		OperationID: m.OperationID, Params: m.Params}}
	w.ctx, w.cancel = context.WithCancel(c.ctx)
	c.watches[m.WatchID] = w
	c.mu.Unlock()
	c.trigger(w)
}

// watchList returns the active watches.
func (c *conn) watchList() []*watch {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]*watch, 0, len(c.watches))
	for _, w := range c.watches {
		out = append(out, w)
	}
	return out
}

// lastSeq is the maxCommitSeq of w's last snapshot (-1 before the first;
// then every commit may touch it, and the first run is under way anyway).
func (c *conn) lastSeq(w *watch) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return w.seq
}

// trigger runs w now, or marks it dirty when a run is in flight (at most
// one rerun pending).
func (c *conn) trigger(w *watch) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if w.removed || c.ctx.Err() != nil {
		return
	}
	if w.running {
		w.dirty = true
		return
	}
	w.running = true
	c.wg.Add(1)
	go c.run(w)
}

func (c *conn) run(w *watch) {
	defer c.wg.Done()
	for {
		res, err := c.eng.Operations().Run(w.ctx, c.id, &w.req)
		c.mu.Lock()
		if w.removed || c.ctx.Err() != nil { // unwatched meanwhile: the result is suppressed
			if w.removed && w.running {
				c.draining--
			}
			w.running = false
			c.mu.Unlock()
			return
		}
		var msg []byte
		if err == nil {
			msg, err = opwire.EncodeSnapshot(w.id, res.Query)
		}
		if err != nil {
			msg = opwire.EncodeWatchError(w.id, syncerr.As(err))
			w.removed, w.running = true, false
			delete(c.watches, w.id)
			w.cancel()
			c.mu.Unlock()
			c.send(msg)
			return
		}
		w.seq = res.Query.MaxCommitSeq
		again := w.dirty
		w.dirty, w.running = false, again
		c.mu.Unlock()
		c.send(msg)
		if !again {
			return
		}
	}
}

// send writes one message; a write that fails or times out closes the
// socket (the reader then ends the connection).
func (c *conn) send(msg []byte) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	ctx, cancel := context.WithTimeout(c.ctx, c.hub.opts.WriteTimeout)
	defer cancel()
	if err := c.ws.Write(ctx, websocket.MessageText, msg); err != nil {
		c.hub.log.Debug("watch socket write failed; closing", zap.String("partition", c.id.Partition), zap.Error(err))
		c.cancel()
		_ = c.ws.CloseNow()
	}
}
