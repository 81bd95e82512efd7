package httpsync

import (
	"net/http"
	"time"
)

// RequestObserver is told of every sync request when its answer is done:
// when it ended, how long it took, and whether it failed (answered with an
// HTTP status of 400 or above, or cut off by a panic). It must be cheap
// and must not block: it runs on the request's goroutine.
type RequestObserver interface {
	ObserveRequest(end time.Time, took time.Duration, failed bool)
}

// ServeHTTP implements http.Handler: it answers the request (serve) and
// tells Options.Observer about it.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	o := h.opts.Observer
	if o == nil {
		h.serve(w, r)
		return
	}
	start := time.Now()
	sw := &statusWriter{ResponseWriter: w}
	done := false
	defer func() {
		status := sw.status
		if status == 0 && done {
			status = http.StatusOK
		}
		// status 0 here: serve panicked before answering (a 500 or an
		// aborted answer for the client).
		end := time.Now()
		o.ObserveRequest(end, end.Sub(start), status == 0 || status >= 400)
	}()
	h.serve(sw, r)
	done = true
}

// statusWriter notes the status of an answer (a switch of protocols
// counts: a realtime upgrade's 101). It unwraps, so http.ResponseController
// and the Mux's recorder (findRecorder) reach the writers under it.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(status int) {
	if w.status == 0 && (status >= 200 || status == http.StatusSwitchingProtocols) {
		w.status = status
	}
	w.ResponseWriter.WriteHeader(status)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Flush implements http.Flusher.
func (w *statusWriter) Flush() {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

// Unwrap returns the writer under w.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
