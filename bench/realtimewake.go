package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/transport/auth"
	"github.com/synclane/synclane/transport/httpsync"
	"github.com/synclane/synclane/transport/realtime"
)

// The wake-up cases (--wake-sockets N) measure what idle sockets that are
// not live cost the honest traffic of their partition. A socket is not
// live when it never pulled (no subscriptions) or when it was behind at
// connect and never acknowledged; SPEC §8.2 wakes it ("catchup-required")
// for each later commit that matches its registration. Three cases, one
// run, one server:
//
//   - no idle sockets: the honest traffic alone;
//   - N idle sockets on other lists: half never pulled, half pulled a list
//     no writer touches; no commit concerns them;
//   - N idle sockets on the written lists: each pulled one subscription to
//     all the writers' lists, so every commit must wake each of them (what
//     every idle socket of the partition cost before wake-ups followed
//     scope keys).
//
// The honest traffic is wakeWriters clients, each sending --wake-commits /
// wakeWriters requests one after another: one upsert to its own list and a
// pull of that list at its cursor in the same request. The idle sockets
// read and drop what they get (a real client would also pull on every
// wake-up, so these figures are the floor of what wake-ups cost).

// wakeWriters is the number of honest push+pull clients.
const wakeWriters = 4

// idleSockets are the idle sockets of one wake-up case and their reader
// goroutines.
type idleSockets struct {
	conns []*websocket.Conn
	wakes atomic.Int64 // wake-ups the clients read
	wg    sync.WaitGroup
}

func (s *idleSockets) close() {
	for _, c := range s.conns {
		_ = c.CloseNow()
	}
	s.wg.Wait()
}

// openIdle opens n sockets, clientIDs prefix0…, each after a pull of one
// subscription to lists (every pullEvery-th client only; the others never
// pull: no subscription); then one commit makes them all behind, so they
// connect not live.
func openIdle(ctx context.Context, rs *rtServer, hc *http.Client, prefix string, n, pullEvery int, lists []string) (*idleSockets, error) {
	errs := make([]error, 32)
	runWorkers(32, func(w int) {
		for i := w; i < n && errs[w] == nil; i += 32 {
			if i%pullEvery != 0 {
				continue
			}
			c := &httpsync.Client{URL: rs.url + "/sync", HTTP: hc, ClientID: prefix + strconv.Itoa(i), Header: http.Header{"X-Actor": {"idler"}}}
			_, errs[w] = c.Pull(ctx, ssp2.PullHeader{Accept: ssp2.AcceptInlineRows},
				&ssp2.Subscription{ID: "s", Table: "todos", Scopes: map[string][]string{"list_id": lists}, Cursor: -1})
		}
	})
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	w := &httpsync.Client{URL: rs.url + "/sync", HTTP: hc, ClientID: prefix + "bump", Header: http.Header{"X-Actor": {"bumper"}}}
	if _, err := w.Push(ctx, &ssp2.PushCommit{ClientCommitID: prefix + "bump",
		Operations: []ssp2.Operation{{Table: "todos", RowID: prefix + "bump", Op: ssp2.OpUpsert, Payload: todoRow(prefix+"bump", "bump", 0)}}}); err != nil {
		return nil, err
	}
	s := &idleSockets{conns: make([]*websocket.Conn, n)}
	runWorkers(32, func(w int) {
		for i := w; i < n && errs[w] == nil; i += 32 {
			c, _, err := websocket.Dial(ctx, rs.url+"/realtime?clientId="+prefix+strconv.Itoa(i), &websocket.DialOptions{HTTPHeader: http.Header{"X-Actor": {"idler"}}})
			if err != nil {
				errs[w] = err
				return
			}
			s.conns[i] = c
		}
	})
	for _, c := range s.conns {
		if c == nil {
			continue
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			for {
				typ, data, err := c.Read(context.Background())
				if err != nil {
					return
				}
				if typ == websocket.MessageText {
					if m, err := ssp2.ParseServerControl(data); err == nil {
						if _, ok := m.(*ssp2.Wake); ok {
							s.wakes.Add(1)
						}
					}
				}
			}
		}()
	}
	if err := errors.Join(errs...); err != nil {
		s.close()
		return nil, err
	}
	for ctx.Err() == nil {
		notLive := 0
		for _, x := range rs.hub.Sessions(auth.DefaultPartition) {
			if !x.Live && strings.HasPrefix(x.ClientID, prefix) {
				notLive++
			}
		}
		if notLive >= n {
			return s, nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	s.close()
	return nil, ctx.Err()
}

// honestTraffic runs the writers' push+pull requests and returns their
// latencies.
func honestTraffic(ctx context.Context, rs *rtServer, hc *http.Client, round string, commits int) (*Hist, error) {
	hists := make([]Hist, wakeWriters)
	errs := make([]error, wakeWriters)
	runWorkers(wakeWriters, func(w int) {
		list := "hot-" + strconv.Itoa(w)
		c := &httpsync.Client{URL: rs.url + "/sync", HTTP: hc, ClientID: "writer-" + strconv.Itoa(w), Header: http.Header{"X-Actor": {"writer"}}}
		if errs[w] = c.Handshake(ctx); errs[w] != nil {
			return
		}
		cursor := int64(-1)
		for i := w; i < commits; i += wakeWriters {
			id := fmt.Sprintf("%s-%s-%d", list, round, i%20)
			start := time.Now()
			resp, err := c.Do(ctx, &ssp2.PushCommit{ClientCommitID: round + "-" + strconv.Itoa(i),
				Operations: []ssp2.Operation{{Table: "todos", RowID: id, Op: ssp2.OpUpsert, Payload: todoRow(id, list, i)}}},
				&ssp2.PullHeader{Accept: ssp2.AcceptInlineRows, LimitCommits: 100, LimitSnapshotRows: 5000, MaxSnapshotPages: 1},
				&ssp2.Subscription{ID: "s", Table: "todos", Scopes: map[string][]string{"list_id": {list}}, Cursor: cursor})
			if err != nil {
				errs[w] = err
				return
			}
			hists[w].Record(time.Since(start))
			if e := subEnd(resp); e != nil {
				cursor = e.NextCursor
			}
		}
	})
	var h Hist
	for i := range hists {
		h.Merge(&hists[i])
	}
	return &h, errors.Join(errs...)
}

// realtimeWakeCases runs the three wake-up cases on one server.
func realtimeWakeCases(ctx context.Context, cfg *Config, store string) ([]Result, error) {
	n, commits := cfg.WakeSockets, cfg.WakeCommits
	rs, err := openRealtime(ctx, cfg, store, realtime.Options{MaxConnections: n + 10})
	if err != nil {
		return nil, err
	}
	defer rs.t.Close()
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	written := make([]string, wakeWriters)
	for i := range written {
		written[i] = "hot-" + strconv.Itoa(i)
	}
	cases := []struct {
		name      string
		pullEvery int
		lists     []string
	}{
		{"no idle sockets", 0, nil},
		{fmt.Sprintf("%d idle sockets not live, on other lists (half never pulled)", n), 2, []string{"cold"}},
		{fmt.Sprintf("%d idle sockets not live, on the written lists", n), 1, written},
	}
	var out []Result
	for k, c := range cases {
		r := Result{Workload: "realtime", Case: "wake-ups: push+pull with " + c.name, Store: store, Mode: "http",
			Params: map[string]any{"sockets": n, "commits": commits, "writers": wakeWriters}}
		var idle *idleSockets
		if c.lists != nil {
			if idle, err = openIdle(ctx, rs, hc, fmt.Sprintf("idle%d-", k), n, c.pullEvery, c.lists); err != nil {
				return out, err
			}
		}
		before := rs.hub.Stats().Wakes[ssp2.WakeCatchupRequired]
		h, err := honestTraffic(ctx, rs, hc, "r"+strconv.Itoa(k), commits)
		sent := rs.hub.Stats().Wakes[ssp2.WakeCatchupRequired] - before
		if idle != nil {
			idle.close()
			r.add("wake-ups read by idle sockets", "", float64(idle.wakes.Load()))
		}
		if err != nil {
			return out, err
		}
		r.add("wake-ups sent", "", float64(sent))
		r.add("wake-ups/commit", "", float64(sent)/float64(commits))
		r.add("push+pull p50", "ms", ms(h.Quantile(0.5)))
		r.add("push+pull p99", "ms", ms(h.Quantile(0.99)))
		r.add("push+pull max", "ms", ms(h.Max()))
		out = append(out, r)
	}
	return out, nil
}
