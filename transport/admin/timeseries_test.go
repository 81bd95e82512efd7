package admin_test

import (
	"net/http"
	"testing"

	"github.com/synclane/synclane/engine/timeseries"
	"github.com/synclane/synclane/storage/memory"
)

// GET /api/timeseries answers the sync requests the handler saw, in
// bounded steps; a refused request counts as an error.
func TestTimeSeriesEndpoint(t *testing.T) {
	s := newServer(t, memory.New())
	for i := range 5 {
		s.push("p1", "ada", "c1", "cc"+string(rune('a'+i)), "t1", "P", "x")
	}
	var before timeseries.Window
	s.ok("GET", "/api/timeseries", &before)
	pushes := before.Total.Requests // the pushes (and the client's own rounds)
	if pushes < 5 || before.Total.Errors != 0 {
		t.Fatalf("after 5 pushes: %+v", before.Total)
	}
	res, err := http.Post(s.syncURL, "text/plain", nil) // 415
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	var w timeseries.Window
	s.ok("GET", "/api/timeseries", &w)
	if w.Seconds != 3600 || w.StepSeconds != 10 || len(w.Points) != 360 {
		t.Fatalf("default window: %d seconds, step %d, %d points", w.Seconds, w.StepSeconds, len(w.Points))
	}
	if w.Total.Requests != pushes+1 || w.Total.Errors != 1 || w.Total.P99Ms <= 0 {
		t.Fatalf("total %+v, want %d requests, 1 error", w.Total, pushes+1)
	}
	var sum uint64
	for _, p := range w.Points {
		sum += p.Requests
	}
	if sum != pushes+1 {
		t.Fatalf("points sum to %d requests", sum)
	}
	for _, tc := range []struct {
		query         string
		seconds, step int
	}{
		{"?seconds=60", 60, 1},
		{"?seconds=60&step=5", 60, 5},
		{"?seconds=3600&step=1", 3600, 5}, // widened to 720 points
		{"?seconds=99999", 3600, 10},
	} {
		var w timeseries.Window
		s.ok("GET", "/api/timeseries"+tc.query, &w)
		if w.Seconds != tc.seconds || w.StepSeconds != tc.step || len(w.Points) != tc.seconds/tc.step {
			t.Errorf("%s: %d seconds, step %d, %d points; want %d, %d", tc.query, w.Seconds, w.StepSeconds, len(w.Points), tc.seconds, tc.step)
		}
	}
}
