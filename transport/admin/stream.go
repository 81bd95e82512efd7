package admin

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/synclane/synclane/engine/events"
)

// streamBuffer is the event stream's subscriber buffer.
const streamBuffer = events.DefaultSubscriberBuffer

// streamWriteTimeout bounds one write of the event stream: a client that
// stops reading is disconnected.
const streamWriteTimeout = 30 * time.Second

// stream serves GET /api/events/stream as Server-Sent Events: the retained
// events after Last-Event-ID (or ?after=), then live ones, until the client
// goes, the subscriber is dropped for being slow, or Close.
func (h *Handler) stream(w http.ResponseWriter, r *http.Request) {
	ring := h.svc.Engine().Events()
	if ring == nil {
		writeJSONError(w, http.StatusNotFound, "admin.not_found", "this server keeps no event ring")
		return
	}
	after := r.Header.Get("Last-Event-ID")
	if after == "" {
		after = r.URL.Query().Get("after")
	}
	last, _ := strconv.ParseUint(after, 10, 64)
	// Subscribe before reading the backlog so nothing falls in between;
	// events seen twice are skipped by seq.
	sub := ring.Subscribe(streamBuffer)
	if sub == nil {
		writeJSONError(w, http.StatusServiceUnavailable, "admin.unavailable",
			fmt.Sprintf("too many event streams are open (at most %d)", events.MaxSubscribers))
		return
	}
	defer sub.Close()
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	write := func(s string) bool {
		_ = rc.SetWriteDeadline(time.Now().Add(streamWriteTimeout))
		if _, err := w.Write([]byte(s)); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	send := func(ev events.Event) bool {
		if ev.Seq <= last {
			return true
		}
		last = ev.Seq
		b, err := json.Marshal(ev)
		if err != nil {
			return false
		}
		return write("id: " + strconv.FormatUint(ev.Seq, 10) + "\nevent: server-event\ndata: " + string(b) + "\n\n")
	}
	if !write(": synclane admin event stream\nretry: 2000\n\n") {
		return
	}
	for _, ev := range ring.Recent(last, 0) {
		if !send(ev) {
			return
		}
	}
	hb := time.NewTicker(h.opts.Heartbeat)
	defer hb.Stop()
	for {
		select {
		case ev, ok := <-sub.C():
			if !ok {
				write("event: dropped\ndata: {\"message\":\"this stream fell behind and was dropped; reconnect with Last-Event-ID\"}\n\n")
				return
			}
			if !send(ev) {
				return
			}
		case <-hb.C:
			if !write(": keep-alive\n\n") {
				return
			}
		case <-r.Context().Done():
			return
		case <-h.done:
			return
		}
	}
}
