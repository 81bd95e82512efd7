// Command segstorm measures what a storm of bootstraps with fake scope
// values leaves in a running `synclane serve`'s segment store (issue 31):
// each bootstrap requests list "L" plus one list value that matches no
// rows, so each has a scope digest of its own while its pages hold the
// same rows. The server must run with development auth (every requested
// value allowed) and its data directory on this machine.
//
//	go run ./bench/segstorm --url http://127.0.0.1:8787 --data ./synclane-data
//
// It seeds --rows todos in list "L" (demo schema) with --title-bytes long
// titles, then runs --storm inline bootstraps (limitSnapshotRows --page,
// so pages over the inline limit are stored), --conc at a time, reading
// every answer, then one honest bootstrap of list "L" alone. It prints
// the files and bytes under <data>/segments.db-data before and after, and
// the server's segment store metrics. Every loop is bounded.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/transport/httpsync"
)

func main() {
	base := flag.String("url", "http://127.0.0.1:8787", "server base URL (sync at /sync)")
	data := flag.String("data", "./synclane-data", "the server's --data directory")
	rows := flag.Int("rows", 50_000, "rows to seed")
	title := flag.Int("title-bytes", 200, "title length of each seeded row")
	storm := flag.Int("storm", 100, "bootstraps with one fake scope value each")
	conc := flag.Int("conc", 10, "bootstraps at a time")
	page := flag.Int("page", 10_000, "limitSnapshotRows of the bootstraps")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	c := &httpsync.Client{URL: *base + "/sync", ClientID: "segstorm-seed", Header: http.Header{"X-Actor": {"segstorm"}}}
	if err := seed(ctx, c, *rows, *title); err != nil {
		fail(err)
	}
	report := func(phase string) {
		files, size := dirUsage(filepath.Join(*data, "segments.db-data"))
		fmt.Printf("%-28s segment files %6d  bytes %8.1f MB", phase, files, float64(size)/(1<<20))
		for _, m := range []string{"synclane_segment_store_files", "synclane_segment_store_bytes", "synclane_segments_evicted_total", "synclane_segments_built_total"} {
			if v, ok := metric(*base, m); ok {
				fmt.Printf("  %s %.0f", strings.TrimPrefix(m, "synclane_"), v)
			}
		}
		fmt.Println()
	}
	report(fmt.Sprintf("seeded %d rows", *rows))
	start := time.Now()
	var wg sync.WaitGroup
	next := make(chan int)
	errs := make(chan error, *conc)
	for range *conc {
		wg.Go(func() {
			for i := range next {
				if _, err := bootstrap(ctx, *base, c.Epoch, fmt.Sprint("segstorm-", i), []string{"L", fmt.Sprintf("fake-%04d", i)}, *page); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	for i := range *storm {
		select {
		case next <- i:
		case err := <-errs:
			fail(err)
		}
	}
	close(next)
	wg.Wait()
	select {
	case err := <-errs:
		fail(err)
	default:
	}
	report(fmt.Sprintf("after %d fake-scope boots", *storm))
	fmt.Printf("storm took %s\n", time.Since(start).Round(time.Millisecond))
	n, err := bootstrap(ctx, *base, c.Epoch, "segstorm-honest", []string{"L"}, *page)
	if err != nil {
		fail(err)
	}
	fmt.Printf("honest bootstrap: %d rows\n", n)
	if n != *rows {
		fail(fmt.Errorf("honest bootstrap got %d rows, want %d", n, *rows))
	}
	report("after the honest bootstrap")
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "segstorm:", err)
	os.Exit(1)
}

func seed(ctx context.Context, c *httpsync.Client, n, titleBytes int) error {
	codec := ssp2.NewRowCodec(schema.MustDemo().Table("todos").Columns)
	for start := 0; start < n; start += 500 {
		var ops []ssp2.Operation
		for i := start; i < min(n, start+500); i++ {
			id := fmt.Sprintf("row-%07d", i)
			payload, err := codec.AppendSparse(nil, ssp2.Row{id, "L", strings.Repeat("x", titleBytes), false, int64(i), int64(i)}, nil, 0)
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

// bootstrap pulls table todos under lists, inline only, until the
// bootstrap is done, and returns the rows received.
func bootstrap(ctx context.Context, base, epoch, clientID string, lists []string, page int) (int, error) {
	rows := 0
	var state json.RawMessage
	for range 1000 {
		sub := &ssp2.Subscription{ID: "s", Table: "todos", Scopes: map[string][]string{"list_id": lists}, Cursor: -1, BootstrapState: state}
		frames := []ssp2.Frame{&ssp2.ReqHeader{ClientID: clientID, SchemaVersion: 1, LogEpoch: &epoch},
			&ssp2.PullHeader{LimitCommits: 1000, LimitSnapshotRows: int32(page), MaxSnapshotPages: 50, Accept: ssp2.AcceptInlineRows}, sub}
		body, err := ssp2.Encode(&ssp2.Message{WireVersion: ssp2.WireV3, Kind: ssp2.KindRequest, Frames: frames})
		if err != nil {
			return 0, err
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/sync", bytes.NewReader(body))
		req.Header.Set("Content-Type", httpsync.ContentType)
		req.Header.Set("X-Actor", "segstorm")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, err
		}
		b, err := io.ReadAll(res.Body)
		res.Body.Close()
		if err != nil {
			return 0, err
		}
		if res.StatusCode != 200 {
			return 0, fmt.Errorf("%s: HTTP %d %s", clientID, res.StatusCode, b)
		}
		msg, err := ssp2.Decode(b)
		if err != nil {
			return 0, err
		}
		state = nil
		for _, f := range msg.Frames {
			switch f := f.(type) {
			case *ssp2.SegmentInline:
				seg, err := ssp2.DecodeSegment(f.Payload)
				if err != nil {
					return 0, err
				}
				for _, b := range seg.Blocks {
					rows += len(b)
				}
			case *ssp2.SubEnd:
				state = f.BootstrapState
			}
		}
		if state == nil {
			return rows, nil
		}
	}
	return 0, fmt.Errorf("%s: bootstrap did not finish", clientID)
}

func dirUsage(dir string) (files int, size int64) {
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if info, err := e.Info(); err == nil && info.Mode().IsRegular() {
			files++
			size += info.Size()
		}
	}
	return files, size
}

// metric reads one unlabelled metric from the server's /metrics.
func metric(base, name string) (float64, bool) {
	res, err := http.Get(base + "/metrics")
	if err != nil {
		return 0, false
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	for _, line := range strings.Split(string(b), "\n") {
		var v float64
		if rest, ok := strings.CutPrefix(line, name+" "); ok {
			if _, err := fmt.Sscan(rest, &v); err == nil {
				return v, true
			}
		}
	}
	return 0, false
}
