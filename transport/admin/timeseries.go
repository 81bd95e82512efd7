package admin

import (
	"context"
	"fmt"
	"net/http"

	adminsvc "github.com/synclane/synclane/engine/admin"
)

// Time series answers.
const (
	// MaxSeriesPoints bounds the points of one GET /api/timeseries answer:
	// a step too small for the window is widened to fit.
	MaxSeriesPoints = 720
	// defaultSeriesPoints is the number of points when no step is asked.
	defaultSeriesPoints = 360
)

// seriesRoute serves GET /api/timeseries?seconds=&step=: the sync
// requests of the newest seconds (default and at most the series' length,
// one hour) in steps of step seconds (default seconds/360 rounded up;
// widened to keep at most MaxSeriesPoints points), with their error count
// and p50/p99 latency. Without Options.Series the route answers 404.
func (h *Handler) seriesRoute(read func(string, func(context.Context, *http.Request) (any, error))) {
	read("GET /api/timeseries", func(ctx context.Context, r *http.Request) (any, error) {
		s := h.opts.Series
		if s == nil {
			return nil, fmt.Errorf("%w: this server records no request time series", adminsvc.ErrNotFound)
		}
		seconds := intArg(r, "seconds")
		if seconds <= 0 || seconds > s.Seconds() {
			seconds = s.Seconds()
		}
		step := intArg(r, "step")
		if step <= 0 {
			step = ceilDiv(seconds, defaultSeriesPoints)
		}
		step = max(step, ceilDiv(seconds, MaxSeriesPoints))
		return s.Window(seconds, step), nil
	})
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }
