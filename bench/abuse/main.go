// Command abuse measures how much memory a running `synclane serve` spends
// on hostile pulls: one request with very many bootstrapping subscriptions,
// and clients that send large bootstrap requests and never read the answer.
// It reads the server's peak resident set (VmHWM) from /proc, so the server
// must run on this machine; pass its pid.
//
//	go run ./bench/abuse --url http://127.0.0.1:8787 --pid $(pgrep -n synclane)
//
// It seeds --rows todos in list "L" (demo schema, development auth), then
// (1) sends one request with --subs subscriptions bootstrapping list L with
// --page rows per page and reads the whole answer; (2) opens --stalled
// connections that each send a request with --stalled-subs such
// subscriptions and never read, holding them --hold long. After each phase
// it prints the server's RSS and peak RSS. Every loop is bounded.
package main

import (
	"bufio"
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/transport/httpsync"
)

func main() {
	base := flag.String("url", "http://127.0.0.1:8787", "server base URL (sync at /sync)")
	pid := flag.Int("pid", 0, "server process id (for /proc/PID/status)")
	rows := flag.Int("rows", 1000, "rows to seed")
	subs := flag.Int("subs", 10000, "subscriptions in the one big request")
	stalled := flag.Int("stalled", 20, "clients that send and never read")
	stalledSubs := flag.Int("stalled-subs", 256, "subscriptions per stalled request")
	page := flag.Int("page", 1000, "limitSnapshotRows of the requests")
	hold := flag.Duration("hold", 5*time.Second, "how long stalled clients hold their connection")
	flag.Parse()
	if *pid == 0 {
		fmt.Fprintln(os.Stderr, "abuse: --pid is required")
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	report := func(phase string) {
		rss, hwm := memOf(*pid)
		heap, inflight := "n/a", "n/a"
		if v, ok := metric(*base, "go_memstats_heap_inuse_bytes"); ok {
			heap = fmt.Sprintf("%.1f MB", v/(1<<20))
		}
		if v, ok := metric(*base, "synclane_http_requests_in_flight"); ok {
			inflight = fmt.Sprint(v - 1) // minus this /metrics request
		}
		fmt.Printf("%-34s rss %7.1f MB  peak %7.1f MB  heap in use %s  requests in flight %s\n", phase, float64(rss)/1024, float64(hwm)/1024, heap, inflight)
	}
	report("start")
	c := &httpsync.Client{URL: *base + "/sync", ClientID: "abuse-seed", Header: http.Header{"X-Actor": {"abuse"}}}
	if err := seed(ctx, c, *rows); err != nil {
		fail(err)
	}
	report(fmt.Sprintf("seeded %d rows", *rows))

	body := request(c.Epoch, "abuse-big", *subs, *page)
	res, err := post(ctx, *base+"/sync", body)
	if err != nil {
		fail(err)
	}
	n, _ := io.Copy(io.Discard, res.Body)
	res.Body.Close()
	fmt.Printf("big request: %d subscriptions, %d B sent → HTTP %d, %d B answered\n", *subs, len(body), res.StatusCode, n)
	report("after the big request")

	u, _ := url.Parse(*base)
	var conns []net.Conn
	for i := range *stalled {
		b := request(c.Epoch, fmt.Sprintf("abuse-stalled-%d", i), *stalledSubs, *page)
		conn, err := net.Dial("tcp", u.Host)
		if err != nil {
			fail(err)
		}
		fmt.Fprintf(conn, "POST /sync HTTP/1.1\r\nHost: %s\r\nContent-Type: %s\r\nX-Actor: abuse\r\nContent-Length: %d\r\n\r\n", u.Host, httpsync.ContentType, len(b))
		if _, err := conn.Write(b); err != nil {
			fail(err)
		}
		conns = append(conns, conn)
	}
	deadline := time.Now().Add(*hold)
	for time.Now().Before(deadline) {
		time.Sleep(250 * time.Millisecond)
	}
	report(fmt.Sprintf("%d stalled clients after %s", *stalled, *hold))
	// How much each stalled connection could still read: what the server
	// kept for it (cut connections read little).
	var kept int64
	for _, conn := range conns {
		conn.SetReadDeadline(time.Now().Add(2 * time.Second))
		n, _ := io.Copy(io.Discard, bufio.NewReader(conn))
		kept += n
		conn.Close()
	}
	fmt.Printf("stalled clients read %d B in total once they started reading\n", kept)
	report("end")
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "abuse:", err)
	os.Exit(1)
}

// seed pushes n todos in list L, 100 per commit.
func seed(ctx context.Context, c *httpsync.Client, n int) error {
	codec := ssp2.NewRowCodec(schema.MustDemo().Table("todos").Columns)
	for start := 0; start < n; start += 100 {
		var ops []ssp2.Operation
		for i := start; i < min(n, start+100); i++ {
			id := fmt.Sprintf("row-%06d", i)
			payload, err := codec.AppendSparse(nil, ssp2.Row{id, "L", "title " + strings.Repeat("x", 40), false, int64(i), int64(i)}, nil, 0)
			if err != nil {
				return err
			}
			ops = append(ops, ssp2.Operation{Table: "todos", RowID: id, Op: ssp2.OpUpsert, Payload: payload})
		}
		if _, err := c.Push(ctx, &ssp2.PushCommit{ClientCommitID: fmt.Sprint("seed-", start), Operations: ops}); err != nil {
			return err
		}
	}
	return nil
}

// request encodes a pull with subs subscriptions, each bootstrapping list L.
func request(epoch, clientID string, subs, page int) []byte {
	frames := []ssp2.Frame{&ssp2.ReqHeader{ClientID: clientID, SchemaVersion: 1, LogEpoch: &epoch},
		&ssp2.PullHeader{LimitCommits: 1000, LimitSnapshotRows: int32(page), MaxSnapshotPages: 50, Accept: ssp2.AcceptInlineRows}}
	for i := range subs {
		frames = append(frames, &ssp2.Subscription{ID: fmt.Sprint("s", i), Table: "todos", Scopes: map[string][]string{"list_id": {"L"}}, Cursor: -1})
	}
	b, err := ssp2.Encode(&ssp2.Message{WireVersion: ssp2.WireV3, Kind: ssp2.KindRequest, Frames: frames})
	if err != nil {
		fail(err)
	}
	return b
}

func post(ctx context.Context, u string, body []byte) (*http.Response, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(body))
	req.Header.Set("Content-Type", httpsync.ContentType)
	req.Header.Set("X-Actor", "abuse")
	return http.DefaultClient.Do(req)
}

// metric reads one unlabelled metric from the server's /metrics (servers
// that do not export it report false).
func metric(base, name string) (float64, bool) {
	res, err := http.Get(base + "/metrics")
	if err != nil {
		return 0, false
	}
	defer res.Body.Close()
	sc := bufio.NewScanner(res.Body)
	for sc.Scan() {
		var v float64
		if _, err := fmt.Sscanf(sc.Text(), name+" %g", &v); err == nil {
			return v, true
		}
	}
	return 0, false
}

// memOf returns the process's resident set and peak resident set in KiB.
func memOf(pid int) (rss, hwm int64) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		fail(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		var v int64
		if _, err := fmt.Sscanf(line, "VmRSS: %d kB", &v); err == nil {
			rss = v
		}
		if _, err := fmt.Sscanf(line, "VmHWM: %d kB", &v); err == nil {
			hwm = v
		}
	}
	return rss, hwm
}
