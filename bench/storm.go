package main

// Bootstrap storms and reconnect churn (issue 27): N clients bootstrap one
// scope from scratch over and over for a duration, each bootstrap a fresh
// pull (cursor -1) followed to its end (resume tokens, every SEGMENT_REF
// downloaded). "storm" is the reference harness's bootstrap-storm (a
// 100,000-row scope, 50,000-row pages, clients taking SQLite images);
// "reconnect" is reconnect churn (a 2,000-row scope that fits one inline
// page, clients taking every lane). Over --http the server runs in a child
// process, so its CPU is read from /proc apart from the clients'; with
// --server-bin the child is a bench binary built from another commit, each
// binary in turn in every run (before/after in one run).

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/synclane/synclane/protocol/ssp2"
)

// serverBin is a bench binary whose server child a case runs against.
type serverBin struct {
	label, path string
}

// parseServerBins parses --server-bin: comma-separated [label=]path (the
// label defaults to the file name).
func parseServerBins(s string) ([]serverBin, error) {
	var out []serverBin
	for _, item := range splitList(s) {
		label, path, ok := strings.Cut(item, "=")
		if !ok {
			label, path = filepath.Base(item), item
		}
		if label == "" || path == "" {
			return nil, fmt.Errorf("bad entry %q: want [label=]path", item)
		}
		out = append(out, serverBin{label: label, path: path})
	}
	return out, nil
}

// churnKind is one of the two workloads: its name, what one operation is
// called, and its defaults (used unless --rows, --page-rows or --lane are
// given, or --quick).
type churnKind struct {
	name, op       string
	rows, pageRows int
	lane           string
}

var (
	stormKind     = churnKind{name: "storm", op: "bootstrap", rows: 100_000, pageRows: 50_000, lane: "sqlite"}
	reconnectKind = churnKind{name: "reconnect", op: "reconnect", rows: 2000, pageRows: 10_000, lane: "all"}
)

// churnAccept maps a --lane to its accept bits ("all": every lane, as the
// official client advertises when it can import images).
var churnAccept = map[string]uint8{"inline": ssp2.AcceptInlineRows, "ref": ssp2.AcceptRefRows,
	"sqlite": ssp2.AcceptRefRows | ssp2.AcceptSQLite, "all": ssp2.AcceptInlineRows | ssp2.AcceptRefRows | ssp2.AcceptSQLite}

func runStorm(ctx context.Context, cfg *Config, store string) ([]Result, error) {
	return runChurn(ctx, cfg, store, stormKind)
}

func runReconnect(ctx context.Context, cfg *Config, store string) ([]Result, error) {
	return runChurn(ctx, cfg, store, reconnectKind)
}

// runChurn runs the workload once per server binary.
func runChurn(ctx context.Context, cfg *Config, store string, k churnKind) ([]Result, error) {
	bins := cfg.ServerBins
	if cfg.Mode != ModeLoopback || len(bins) == 0 {
		bins = []serverBin{{}}
	}
	var out []Result
	for _, b := range bins {
		r, err := churnCase(ctx, cfg, store, k, b)
		out = append(out, r)
		if err != nil {
			return out, err
		}
	}
	return out, nil
}

// churnCase seeds the scope, bootstraps it once (the pages or image of its
// pin are built then, as in any storm after its first client), and has
// cfg.VUs clients bootstrap it over and over: the rate, latency and the
// server's CPU per bootstrap over the measured window. Client 0 decodes
// and counts every row of every bootstrap; the others drain (inline pages
// skipped as they are read, segments downloaded and their length checked),
// so the harness spends little of the shared cores.
func churnCase(ctx context.Context, cfg *Config, store string, k churnKind, bin serverBin) (Result, error) {
	n, pageRows, lane := k.rows, k.pageRows, k.lane
	if cfg.Set["rows"] || cfg.Quick {
		n = cfg.Rows[0]
	}
	if cfg.Set["page-rows"] || cfg.Quick {
		pageRows = cfg.PageRows
	}
	if cfg.Set["lane"] {
		lane = cfg.Lane
	}
	r := Result{Workload: k.name, Case: fmt.Sprintf("%d clients, %d rows, %d rows/page, %s", cfg.VUs, n, pageRows, lane),
		Store: store, Mode: string(cfg.Mode), Params: map[string]any{"clients": cfg.VUs, "rows": n, "pageRows": pageRows, "lane": lane, "freshClients": cfg.FreshClients}}
	if cfg.FreshClients {
		r.Case += ", a fresh client per " + k.op
	}
	if cfg.SkipSegments {
		r.Case += ", segments not downloaded"
		r.Params["skipSegments"] = true
	}
	if bin.label != "" {
		r.Case += ", server " + bin.label
		r.Params["server"] = bin.label
	}
	accept, ok := churnAccept[lane]
	if !ok {
		return r, fmt.Errorf("--lane %q: want inline, ref, sqlite or all", lane)
	}
	var t *Target
	var err error
	if cfg.Mode == ModeLoopback {
		r.Case += ", server in a child process"
		t, err = openServerProc(ctx, cfg, store, bin.path)
	} else {
		t, err = openTarget(ctx, cfg, store, EngineOpts{ServeSegments: true})
	}
	if err != nil {
		return r, err
	}
	defer t.Close()
	r.Store = t.Store
	if err := seedRows(ctx, t, "churn", n); err != nil {
		return r, err
	}
	ph := &ssp2.PullHeader{Accept: accept, LimitSnapshotRows: int32(pageRows), MaxSnapshotPages: int32(cfg.Pages)}
	maxReq := n/max(pageRows, 1) + 100
	if first, err := drainBootstrap(ctx, t.Client("first", "churn", "churn-first"), ph, true, maxReq); err != nil {
		return r, err
	} else if first.rows != int64(n) {
		return r, fmt.Errorf("first bootstrap got %d rows, want %d", first.rows, n)
	}
	clients := make([]*Client, cfg.VUs)
	for i := range clients {
		clients[i] = t.Client("churn-"+strconv.Itoa(i), "churn", "churn-"+strconv.Itoa(i))
		clients[i].stripInline = i > 0
		clients[i].skipSegments = cfg.SkipSegments
		if err := clients[i].Handshake(ctx); err != nil {
			return r, fmt.Errorf("handshake: %w", err)
		}
	}
	cpu := newCPUMeter(cfg.ServerPID, t.Mode)
	if t.pid > 0 {
		cpu = &cpuMeter{pid: t.pid, what: "the server child's CPU time (/proc/PID/stat)"}
	}
	ph0 := newPhase(cfg.Warmup, cfg.Duration, cfg.MaxOps)
	cpuStartAt := cpu.sampleAt(ctx, ph0.measureFrom)
	var probeStartAt func() (heapProbe, error)
	if t.pid > 0 {
		probeStartAt = t.probeAt(ctx, ph0.measureFrom)
	}
	stopWriter := func() scopeWriterOut { return scopeWriterOut{} }
	if cfg.ScopeWriterRate > 0 {
		r.Case += fmt.Sprintf(", a writer at %g commits/s in the scope", cfg.ScopeWriterRate)
		r.Params["scopeWriterRate"] = cfg.ScopeWriterRate
		stopWriter = startScopeWriter(ctx, t.Client("scope-writer", "churn", "churn-writer"), cfg.ScopeWriterRate, n, ph0)
	}
	tallies := make([]tally, len(clients))
	runWorkers(len(clients), func(i int) {
		c, tl := clients[i], &tallies[i]
		for seq := 0; ph0.next() && ctx.Err() == nil; seq++ {
			t0 := time.Now()
			if cfg.FreshClients && seq > 0 {
				// A new client: a new clientId, no epoch (Do acquires it
				// first, as a client's first request does).
				nc := t.Client(c.id.ActorID, "churn", fmt.Sprintf("churn-%d-%d", i, seq))
				nc.stripInline, nc.inlineStripped, nc.BytesIn, nc.skipSegments = c.stripInline, c.inlineStripped, c.BytesIn, c.skipSegments
				c = nc
			}
			stripped := c.inlineStripped
			out, err := drainBootstrap(ctx, c, ph, i == 0, maxReq)
			// Rows are counted by client 0, and by the others when no
			// inline page (skipped unread) carried any.
			if err == nil && (i == 0 || out.inline+c.inlineStripped == stripped) && out.rows != int64(n) {
				err = fmt.Errorf("client %d: a bootstrap got %d rows, want %d", i, out.rows, n)
			}
			if err != nil {
				tl.fail(err)
				if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
					return
				}
				continue
			}
			if ph0.measuring(t0) {
				tl.lat.Record(time.Since(t0))
				tl.ok++
			}
		}
	})
	cpuStart, cpuEnd := cpuStartAt(), cpu.sample()
	elapsed := time.Since(ph0.measureFrom)
	wr := stopWriter()
	tot, ferr := mergeTallies(tallies)
	r.add(k.op+"s/s", "1/s", float64(tot.ok)/elapsed.Seconds())
	r.add("p50", "ms", ms(tot.lat.Quantile(0.50)))
	r.add("p95", "ms", ms(tot.lat.Quantile(0.95)))
	if tot.ok > 0 && cpuStart.ok && cpuEnd.ok {
		r.add("server CPU/"+k.op, "ms", ms(cpuEnd.cpu-cpuStart.cpu)/float64(tot.ok))
		r.Notes = append(r.Notes, "server CPU/"+k.op+" is "+cpu.what+" over the measured window ÷ "+k.op+"s completed in it")
	}
	if hwm, ok := cpu.peakRSS(); ok {
		r.add("server peak RSS", "MB", float64(hwm)/1024)
	}
	if probeStartAt != nil {
		start, err := probeStartAt()
		if err != nil {
			return r, err
		}
		end, err := t.probeRead(ctx)
		if err != nil {
			return r, err
		}
		if tot.ok > 0 && end.HasEncoded {
			r.add("pages encoded/"+k.op, "", float64(end.Segments.Encoded-start.Segments.Encoded)/float64(tot.ok))
			r.add("pages patched/"+k.op, "", float64(end.Segments.Patched-start.Segments.Patched)/float64(tot.ok))
		}
		r.add("segments built", "", float64(end.Segments.Built-start.Segments.Built))
		if w := end.Engine.ClientBindingWrites - start.Engine.ClientBindingWrites; w > 0 {
			r.add("client bindings/write", "", float64(end.Engine.ClientBindings-start.Engine.ClientBindings)/float64(w))
		}
		if g := end.Engine.PullGroups - start.Engine.PullGroups; g > 0 {
			r.add("pulls/group", "", float64(end.Engine.GroupedPulls-start.Engine.GroupedPulls)/float64(g))
		}
		downloads := end.Segments.Served - start.Segments.Served
		r.add("segment downloads", "", float64(downloads))
		if downloads > 0 {
			r.add("bytes/download", "MiB", float64(end.Segments.ServedBytes-start.Segments.ServedBytes)/float64(downloads)/(1<<20))
		}
	}
	r.add(k.op+"s", "", float64(tot.ok))
	if cfg.ScopeWriterRate > 0 {
		r.add("writer commits/s", "1/s", float64(wr.commits)/elapsed.Seconds())
		r.add("writer errors", "", float64(wr.errs))
		if wr.err != nil {
			r.Notes = append(r.Notes, "first writer error: "+wr.err.Error())
		}
		r.Notes = append(r.Notes, "server CPU includes the writer's commits (one single-row update each)")
	}
	r.add("errors", "", float64(tot.errs))
	if ferr != nil {
		r.Notes = append(r.Notes, "first error: "+ferr.Error())
	}
	if note := kindsNote("errors by kind", tot.kinds); note != "" {
		r.Notes = append(r.Notes, note)
	}
	return r, nil
}

// probeAt reads the server child's probe at time at (or when ctx ends,
// then its error) on a goroutine it owns; the returned func waits for it.
func (t *Target) probeAt(ctx context.Context, at time.Time) func() (heapProbe, error) {
	var p heapProbe
	var err error
	done := make(chan struct{})
	go func() {
		defer close(done)
		select {
		case <-time.After(time.Until(at)):
			p, err = t.probeRead(ctx)
		case <-ctx.Done():
			err = ctx.Err()
		}
	}()
	return func() (heapProbe, error) { <-done; return p, err }
}

// scopeWriterOut is what the scope writer did in the measured window.
type scopeWriterOut struct {
	commits, errs int
	err           error
}

// startScopeWriter starts a writer committing rate commits/s into the
// churn scope until the phase ends: each commit updates one of the n
// seeded rows (in turn), so the scope keeps n rows and every commit moves
// the scope's pin. Commits are issued on the rate's ticks whatever the
// latency of the ones in flight (at most 64 at once, then ticks are
// skipped), so a loaded server still gets its rate. The returned func
// stops it, waits for every push in flight and reports the commits made
// in the measured window.
func startScopeWriter(ctx context.Context, c *Client, rate float64, n int, ph *Phase) func() scopeWriterOut {
	ctx, cancel := context.WithCancel(ctx)
	var mu sync.Mutex
	var out scopeWriterOut
	var wg sync.WaitGroup
	sem := make(chan struct{}, 64)
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(time.Duration(float64(time.Second) / rate))
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			select {
			case sem <- struct{}{}:
			default:
				continue // 64 in flight: skip the tick
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				j := (i * 7919) % n
				t0 := time.Now()
				_, err := pushOne(ctx, c, "w"+strconv.Itoa(i), todoUpsert(fmt.Sprintf("todo-%07d", j), listID(j), int64(n+i)))
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err != nil && ctx.Err() != nil:
				case err != nil:
					out.errs++
					if out.err == nil {
						out.err = err
					}
				case !t0.Before(ph.measureFrom):
					out.commits++
				}
			}()
		}
	}()
	return func() scopeWriterOut {
		cancel()
		wg.Wait()
		return out
	}
}
