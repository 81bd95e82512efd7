package main

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"time"

	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/transport/httpsync/httpsynctest"
)

// seedRows writes n todos into partition with 500-operation commits from
// four concurrent seeding clients.
func seedRows(ctx context.Context, t *Target, partition string, n int) error {
	const perCommit, seeders = 500, 4
	errs := make([]error, seeders)
	runWorkers(seeders, func(s int) {
		c := t.Client("seeder-"+strconv.Itoa(s), partition, "seed"+strconv.Itoa(s))
		ops := make([]ssp2.Operation, 0, perCommit)
		commit := 0
		for i := s * perCommit; i < n && errs[s] == nil; i += seeders * perCommit {
			ops = ops[:0]
			for j := i; j < min(i+perCommit, n); j++ {
				ops = append(ops, todoUpsert(fmt.Sprintf("todo-%07d", j), listID(j), int64(j)))
			}
			commit++
			_, errs[s] = pushOne(ctx, c, "seed-"+strconv.Itoa(commit), ops...)
		}
	})
	for _, err := range errs {
		if err != nil {
			return fmt.Errorf("seed: %w", err)
		}
	}
	return nil
}

// bootstrapCase seeds n rows, then measures one fresh client bootstrapping
// them end to end: epoch handshake, paged snapshot pulls, decoding and
// applying every segment into an in-memory replica. With --server-proc the
// server runs in a child process: its peak heap during the bootstrap is
// probed and set against the page bytes, and a bare SELECT+encode loop over
// the same rows gives the baseline; --storm N then times N concurrent fresh
// clients against one client (both draining, see drainBootstrap).
func bootstrapCase(ctx context.Context, cfg *Config, store string, n int) (Result, error) {
	lane := cfg.Lane
	if lane == "" {
		lane = "inline"
	}
	accept, ok := map[string]uint8{"inline": ssp2.AcceptInlineRows, "ref": ssp2.AcceptRefRows,
		"sqlite": ssp2.AcceptRefRows | ssp2.AcceptSQLite}[lane]
	r := Result{Workload: "bootstrap", Case: fmt.Sprintf("%d rows, %d rows/page, %d pages/request, %s", n, cfg.PageRows, cfg.Pages, lane),
		Store: store, Mode: string(cfg.Mode), Params: map[string]any{"rows": n, "pageRows": cfg.PageRows, "pages": cfg.Pages, "lane": lane}}
	if !ok {
		return r, fmt.Errorf("--lane %q: want inline, ref or sqlite", lane)
	}
	proc := cfg.ServerProc && cfg.Mode == ModeLoopback
	if cfg.Storm > 0 && !proc {
		return r, fmt.Errorf("--storm needs --server-proc --http")
	}
	var t *Target
	var err error
	if proc {
		r.Case += ", server in a child process"
		if cfg.ServerGOGC > 0 {
			r.Case += fmt.Sprintf(" (GOGC=%d)", cfg.ServerGOGC)
		}
		t, err = openServerProc(ctx, cfg, store, "")
	} else {
		t, err = openTarget(ctx, cfg, store, EngineOpts{})
	}
	if err != nil {
		return r, err
	}
	defer t.Close()
	r.Store = t.Store
	if err := seedRows(ctx, t, "boot", n); err != nil {
		return r, err
	}
	sch := schema.MustDemo()
	scopes := map[string][]string{"list_id": allLists}
	ph := &ssp2.PullHeader{Accept: accept, LimitSnapshotRows: int32(cfg.PageRows), MaxSnapshotPages: int32(cfg.Pages)}
	maxReq := n/max(cfg.PageRows, 1) + 100
	if proc {
		if err := t.probeReset(ctx); err != nil {
			return r, err
		}
	}

	c := t.Client("reader", "boot", "boot-reader")
	rep := httpsynctest.NewReplica(nil, sch)
	rep.Subscribe("s", "todos", scopes)
	base := heapAfterGC()
	samp := startHeapSampler(2 * time.Millisecond)
	start := time.Now()
	requests := 0
	var lat Hist
	for done := false; !done; {
		if requests > maxReq || ctx.Err() != nil {
			samp.Stop()
			return r, fmt.Errorf("bootstrap did not converge after %d requests", requests)
		}
		s := rep.Subs[0]
		t0 := time.Now()
		// Pages are decoded and applied as they arrive (a streaming
		// client; refs downloaded ahead), so the client's work overlaps
		// the server's next page.
		a := rep.Applier()
		var err error
		if lane == "sqlite" {
			var msg *ssp2.Message
			if msg, err = c.Do(ctx, ph, allTodos(s.ID, s.Cursor, s.Token)); err == nil {
				if err = c.ResolveSegments(ctx, msg, scopes, sch); err == nil {
					for _, f := range msg.Frames {
						if err = a.Frame(f); err != nil {
							break
						}
					}
				}
			}
		} else {
			err = c.Stream(ctx, scopes, sch, a.Frame, ph, allTodos(s.ID, s.Cursor, s.Token))
		}
		if err != nil {
			samp.Stop()
			return r, err
		}
		requests++
		st := a.Stats()
		lat.Record(time.Since(t0))
		done = !st.Incomplete
	}
	elapsed := time.Since(start)
	peak := samp.Stop()
	got := len(rep.Rows["todos"])
	if got != n {
		return r, fmt.Errorf("bootstrap converged with %d rows, want %d", got, n)
	}
	r.add("rows/s", "1/s", float64(n)/elapsed.Seconds())
	r.add("time", "ms", ms(elapsed))
	r.add("requests", "", float64(requests))
	r.add("request p50", "ms", ms(lat.Quantile(0.5)))
	r.add("bytes/row", "B", float64(c.BytesIn)/float64(n))
	if proc {
		r.add("harness heap growth (client only)", "MiB", float64(int64(peak)-int64(base))/(1<<20))
	} else {
		r.add("peak heap growth", "MiB", float64(int64(peak)-int64(base))/(1<<20))
	}
	r.add("replica heap", "MiB", float64(int64(heapAfterGC())-int64(base))/(1<<20))
	runtime.KeepAlive(rep)
	switch {
	case cfg.Mode == ModeURL:
		r.Notes = append(r.Notes, "heap figures are the harness (client) only")
	case proc:
		r.Notes = append(r.Notes, "server heap: sampled every 1 ms in the server child (objects = live + unswept garbage; live = as marked by the last GC); page bytes = response bytes × page rows / rows")
	default:
		r.Notes = append(r.Notes, "heap figures cover server and client in one process")
	}
	if !proc {
		return r, nil
	}
	hp, err := t.probeRead(ctx)
	if err != nil {
		return r, err
	}
	pageBytes := float64(c.BytesIn) * float64(min(cfg.PageRows, n)) / float64(n)
	objects, live := float64(hp.PeakObjects-hp.BaseObjects), float64(max(hp.PeakLive, hp.BaseLive)-hp.BaseLive)
	r.add("page bytes", "KiB", pageBytes/1024)
	r.add("server peak heap growth (objects)", "MiB", objects/(1<<20))
	r.add("server peak heap growth (live)", "MiB", live/(1<<20))
	r.add("server heap ÷ page (objects)", "x", objects/pageBytes)
	r.add("server heap ÷ page (live)", "x", live/pageBytes)
	r.add("server CPU", "ms", hp.CPUSeconds*1000)
	if t.dbPath != "" {
		bare, bareCPU, err := bareLoop(ctx, t.dbPath, t.Prefix+"boot", sch.Table("todos"), sch.Version, cfg.PageRows)
		if err != nil {
			return r, err
		}
		r.add("bare SELECT+encode rows/s", "1/s", bare)
		r.add("bare SELECT+encode CPU", "ms", bareCPU*1000)
		r.add("rows/s ÷ bare loop", "x", float64(n)/elapsed.Seconds()/bare)
		r.add("server CPU ÷ bare loop CPU", "x", hp.CPUSeconds/bareCPU)
	}
	if cfg.Storm > 0 {
		if err := stormPhase(ctx, cfg, t, &r, ph, n, maxReq, elapsed, lane); err != nil {
			return r, err
		}
	}
	return r, nil
}

// stormPhase times cfg.Storm concurrent fresh clients bootstrapping the
// scope against one client doing the same, in the same run, each at a pin
// no earlier bootstrap built segments for (one row is rewritten before
// each, so every segment is cold). Storm clients drain (drainBootstrap):
// applying 50 replicas would measure the harness's CPU on the shared cores,
// not the server's reuse. The one client and storm client 0 decode every
// segment; the other storm clients check their bytes equal client 0's.
func stormPhase(ctx context.Context, cfg *Config, t *Target, r *Result, ph *ssp2.PullHeader, n, maxReq int, single time.Duration, lane string) error {
	bump := t.Client("bumper", "boot", "boot-bumper")
	rev := 0
	newPin := func() error {
		rev++
		_, err := pushOne(ctx, bump, "bump-"+strconv.Itoa(rev), todoUpsert("todo-0000000", listID(0), int64(n+rev)))
		return err
	}
	if err := newPin(); err != nil {
		return err
	}
	one := t.Client("drain-one", "boot", "boot-drain-one")
	t0 := time.Now()
	d1, err := drainBootstrap(ctx, one, ph, true, maxReq)
	if err != nil {
		return err
	}
	oneTime := time.Since(t0)
	if d1.rows != int64(n) {
		return fmt.Errorf("drain bootstrap got %d rows, want %d", d1.rows, n)
	}
	if err := newPin(); err != nil {
		return err
	}
	before, err := t.probeRead(ctx)
	if err != nil {
		return err
	}
	outs := make([]drainOut, cfg.Storm)
	errs := make([]error, cfg.Storm)
	clients := make([]*Client, cfg.Storm)
	for i := range clients {
		clients[i] = t.Client("storm-"+strconv.Itoa(i), "boot", "boot-storm-"+strconv.Itoa(i))
		// Client 0 decodes and counts every row; the others skip decoding
		// inline segments (their bytes must equal client 0's), so the storm
		// times the server rather than 50 decoders on the shared cores.
		clients[i].stripInline = i > 0
	}
	t0 = time.Now()
	runWorkers(cfg.Storm, func(i int) {
		outs[i], errs[i] = drainBootstrap(ctx, clients[i], ph, i == 0, maxReq)
	})
	wall := time.Since(t0)
	for i, err := range errs {
		if err != nil {
			return fmt.Errorf("storm client %d: %w", i, err)
		}
		if clients[i].BytesIn != clients[0].BytesIn || (i == 0 && outs[i].rows != int64(n)) {
			return fmt.Errorf("storm client %d: %d bytes, %d rows; client 0: %d bytes (want %d rows)", i, clients[i].BytesIn, outs[i].rows, clients[0].BytesIn, n)
		}
	}
	after, err := t.probeRead(ctx)
	if err != nil {
		return err
	}
	r.add("one drain client", "ms", ms(oneTime))
	r.add("storm wall", "ms", ms(wall))
	r.add("storm ÷ one bootstrap", "x", wall.Seconds()/single.Seconds())
	r.add("storm ÷ one drain client", "x", wall.Seconds()/oneTime.Seconds())
	r.add("storm segments built", "", float64(after.Segments.Built-before.Segments.Built))
	r.add("storm segments reused", "", float64(after.Segments.Reused-before.Segments.Reused))
	r.add("storm segments served", "", float64(after.Segments.Served-before.Segments.Served))
	if lane == "inline" {
		r.add("storm inline pages", "", float64(outs[0].inline+clients[1%cfg.Storm].inlineStripped*(cfg.Storm-1)))
	}
	return nil
}

// drainOut is what drainBootstrap saw.
type drainOut struct {
	rows   int64 // rows of the refs, plus those of inline segments when counted
	inline int   // inline segments
}

// drainBootstrap bootstraps the demo scope without a replica: it follows
// the resume tokens, downloads every SEGMENT_REF (checking its length) and
// counts rows; inline segments are validated by the response decoder and
// their rows counted only when countInline is set.
func drainBootstrap(ctx context.Context, c *Client, ph *ssp2.PullHeader, countInline bool, maxReq int) (drainOut, error) {
	var out drainOut
	cursor, state := int64(-1), []byte(nil)
	scopes := map[string][]string{"list_id": allLists}
	for req := 0; ; req++ {
		if req > maxReq {
			return out, fmt.Errorf("drain bootstrap did not converge after %d requests", req)
		}
		resp, err := c.Do(ctx, ph, allTodos("s", cursor, state))
		if err != nil {
			return out, err
		}
		var end *ssp2.SubEnd
		for _, f := range resp.Frames {
			switch x := f.(type) {
			case *ssp2.SegmentRef:
				if c.skipSegments {
					// A client that holds this content address already
					// (its segment cache): the reference is the answer.
					out.rows += x.RowCount
					continue
				}
				var n int64
				if sz, ok := c.rt.(segmentSizer); ok {
					n, err = sz.segmentSize(ctx, c.id, x.SegmentID, scopes)
				} else {
					var data []byte
					data, err = c.rt.segment(ctx, c.id, x.SegmentID, scopes)
					n = int64(len(data))
				}
				if err != nil {
					return out, err
				}
				if n != x.ByteLength {
					return out, fmt.Errorf("segment %s: %d bytes, ref says %d", x.SegmentID, n, x.ByteLength)
				}
				c.BytesIn += n
				out.rows += x.RowCount
			case *ssp2.SegmentInline:
				out.inline++
				if countInline {
					seg, err := ssp2.DecodeSegment(x.Payload)
					if err != nil {
						return out, err
					}
					for _, b := range seg.Blocks {
						out.rows += int64(len(b))
					}
				}
			case *ssp2.ErrorFrame:
				return out, fmt.Errorf("drain bootstrap: ERROR %s: %s", x.Code, x.Message)
			case *ssp2.SubEnd:
				end = x
			}
		}
		if end == nil {
			return out, errors.New("drain bootstrap: no SUB_END")
		}
		cursor, state = end.NextCursor, end.BootstrapState
		if state == nil {
			return out, nil
		}
	}
}

// runBootstrap runs the bootstrap workload for every row count.
func runBootstrap(ctx context.Context, cfg *Config, store string) ([]Result, error) {
	var out []Result
	for _, n := range cfg.Rows {
		r, err := bootstrapCase(ctx, cfg, store, n)
		if err != nil {
			return out, err
		}
		out = append(out, r)
	}
	return out, nil
}
