package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/transport/httpsync"
)

// TasksSchemaJSON is the schema of the pushpull workload (the reference
// load harness's tasks table). `synclane serve --schema` takes it for
// --url runs.
const TasksSchemaJSON = `{"version":1,"tables":[{"name":"tasks","columns":[
 {"name":"id","type":"string"},{"name":"project_id","type":"string"},{"name":"title","type":"string"},
 {"name":"done","type":"boolean"},{"name":"priority","type":"integer"},{"name":"updated_at_ms","type":"integer"}],
 "primaryKey":"id","scopes":["project:{project_id}"]}]}`

var tasksSchema = func() *schema.Schema {
	s, err := schema.Parse([]byte(TasksSchemaJSON))
	if err != nil {
		panic(err)
	}
	return s
}()

var tasksCodec = ssp2.NewRowCodec(tasksSchema.Table("tasks").Columns)

// browserAcceptEncoding is what Bun's fetch and current browsers send.
const browserAcceptEncoding = "gzip, deflate, br, zstd"

// pushpullRowsPerVU is how many distinct rows a virtual client cycles
// through (row <project>-r<seq % 20>).
const pushpullRowsPerVU = 20

// pushpullCase runs the reference harness's push-pull round: each virtual
// client owns one project_id; a round is ONE request carrying a commit with
// one upsert and a pull of its project's subscription at its cursor (limit
// 100 commits, 5,000 snapshot rows, 1 page, inline rows), over one
// keep-alive connection per client sending a browser's Accept-Encoding.
func pushpullCase(ctx context.Context, cfg *Config, store string) (Result, error) {
	r := Result{Workload: "pushpull", Case: fmt.Sprintf("%d virtual clients, 1 partition, push+pull per round", cfg.VUs), Store: store, Mode: string(cfg.Mode),
		Params: map[string]any{"vus": cfg.VUs, "duration": cfg.Duration.String()}}
	t, err := openTarget(ctx, cfg, store, EngineOpts{Schema: tasksSchema})
	if err != nil {
		return r, err
	}
	defer t.Close()
	r.Store = t.Store
	if hr, ok := t.rt.(httpRT); ok {
		// One connection per client, browser encodings, decompressed here.
		t.rt = browserRT{url: hr.url, hc: hr.hc}
	}
	type vu struct {
		c       *Client
		project string
		cursor  int64
	}
	vus := make([]*vu, cfg.VUs)
	for i := range vus {
		v := &vu{c: t.Client("vu-"+strconv.Itoa(i), "pushpull", "vu"+strconv.Itoa(i)), project: "p" + strconv.Itoa(i), cursor: -1}
		if err := v.c.Handshake(ctx); err != nil {
			return r, fmt.Errorf("handshake: %w", err)
		}
		vus[i] = v
	}
	cpu := newCPUMeter(cfg.ServerPID, t.Mode)
	ph := newPhase(cfg.Warmup, cfg.Duration, cfg.MaxOps)
	tallies := make([]tally, len(vus))
	cpuStartAt := cpu.sampleAt(ctx, ph.measureFrom)
	runWorkers(len(vus), func(w int) {
		v, tl := vus[w], &tallies[w]
		for n := int64(0); ph.next() && ctx.Err() == nil; n++ {
			id := v.project + "-r" + strconv.Itoa(int(n%pushpullRowsPerVU))
			row, err := tasksCodec.AppendSparse(nil, ssp2.Row{id, v.project, "task " + id, n%2 == 0, n % 5, time.Now().UnixMilli()}, nil, 0)
			if err != nil {
				tl.fail(err)
				return
			}
			t0 := time.Now()
			resp, err := v.c.Do(ctx,
				&ssp2.PushCommit{ClientCommitID: "c" + strconv.FormatInt(n, 10), Operations: []ssp2.Operation{{Table: "tasks", RowID: id, Op: ssp2.OpUpsert, Payload: row}}},
				&ssp2.PullHeader{LimitCommits: 100, LimitSnapshotRows: 5000, MaxSnapshotPages: 1, Accept: ssp2.AcceptInlineRows},
				&ssp2.Subscription{ID: "tasks", Table: "tasks", Scopes: map[string][]string{"project_id": {v.project}}, Cursor: v.cursor})
			if err != nil {
				tl.fail(err)
				continue
			}
			for _, f := range resp.Frames {
				if e, ok := f.(*ssp2.SubEnd); ok {
					v.cursor = e.NextCursor
				}
			}
			if ph.measuring(t0) {
				tl.lat.Record(time.Since(t0))
				tl.ok++
			}
		}
	})
	cpuStart := cpuStartAt()
	cpuEnd := cpu.sample()
	elapsed := time.Since(ph.measureFrom)
	tot, ferr := mergeTallies(tallies)
	r.add("rounds/s", "1/s", float64(tot.ok)/elapsed.Seconds())
	r.add("p50", "ms", ms(tot.lat.Quantile(0.50)))
	r.add("p95", "ms", ms(tot.lat.Quantile(0.95)))
	r.add("p99", "ms", ms(tot.lat.Quantile(0.99)))
	if tot.ok > 0 && cpuEnd.ok && cpuStart.ok {
		r.add("CPU/round", "ms", ms(cpuEnd.cpu-cpuStart.cpu)/float64(tot.ok))
		r.Notes = append(r.Notes, "CPU/round is "+cpu.what)
	}
	if hwm, ok := cpu.peakRSS(); ok {
		r.add("peak RSS", "MB", float64(hwm)/1024)
	}
	r.add("rounds", "", float64(tot.ok))
	r.add("errors", "", float64(tot.errs))
	if ferr != nil {
		r.Notes = append(r.Notes, "first error: "+ferr.Error())
	}
	if note := kindsNote("errors by kind", tot.kinds); note != "" {
		r.Notes = append(r.Notes, note)
	}
	return r, nil
}

func runPushpull(ctx context.Context, cfg *Config, store string) ([]Result, error) {
	r, err := pushpullCase(ctx, cfg, store)
	if err != nil {
		return nil, err
	}
	return []Result{r}, nil
}

// browserRT posts like a browser: keep-alive, Accept-Encoding of a browser,
// the answer decompressed by the client.
type browserRT struct {
	url string
	hc  *http.Client
}

func (b browserRT) roundTrip(ctx context.Context, id engine.Identity, body []byte) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, b.url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", httpsync.ContentType)
	req.Header.Set("Accept-Encoding", browserAcceptEncoding)
	req.Header.Set("x-actor", id.ActorID)
	req.Header.Set("x-partition", id.Partition)
	res, err := b.hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	var rd io.Reader = res.Body
	switch res.Header.Get("Content-Encoding") {
	case "gzip":
		zr, err := gzip.NewReader(res.Body)
		if err != nil {
			return nil, err
		}
		rd = zr
	case "zstd":
		zr, err := zstd.NewReader(res.Body, zstd.WithDecoderConcurrency(1))
		if err != nil {
			return nil, err
		}
		defer zr.Close()
		rd = zr
	case "", "identity":
	default:
		return nil, fmt.Errorf("bench: unexpected Content-Encoding %q", res.Header.Get("Content-Encoding"))
	}
	data, err := io.ReadAll(rd)
	if err != nil {
		return nil, fmt.Errorf("bench: read response: %w", err)
	}
	if res.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("bench: HTTP %d: %s", res.StatusCode, bytes.TrimSpace(data))
	}
	return data, nil
}

// cpuMeter reads the CPU time of the server under test: this process for
// in-process and loopback runs (load generator included), or the process
// --server-pid names for --url runs (the server alone).
type cpuMeter struct {
	pid  int
	what string
}

type cpuSample struct {
	cpu time.Duration
	ok  bool
}

func newCPUMeter(pid int, mode Mode) *cpuMeter {
	switch {
	case mode == ModeURL && pid > 0:
		return &cpuMeter{pid: pid, what: "the server process's CPU time (/proc/" + strconv.Itoa(pid) + "/stat) per round"}
	case mode == ModeURL:
		return &cpuMeter{pid: -1, what: "unknown (pass --server-pid)"}
	default:
		return &cpuMeter{what: "this process's CPU time (getrusage; server and load generator together) per round"}
	}
}

func (m *cpuMeter) sample() cpuSample {
	switch {
	case m.pid < 0:
		return cpuSample{}
	case m.pid == 0:
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			return cpuSample{}
		}
		return cpuSample{cpu: time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), ok: true}
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(m.pid) + "/stat")
	if err != nil {
		return cpuSample{}
	}
	// Fields after the parenthesized command: utime is the 14th field
	// overall, stime the 15th, in clock ticks (100 Hz on Linux).
	s := string(b)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(fields) < 13 {
		return cpuSample{}
	}
	ut, err1 := strconv.ParseInt(fields[11], 10, 64)
	st, err2 := strconv.ParseInt(fields[12], 10, 64)
	if err1 != nil || err2 != nil {
		return cpuSample{}
	}
	return cpuSample{cpu: time.Duration(ut+st) * 10 * time.Millisecond, ok: true}
}

// sampleAt samples the CPU time at t (or when ctx ends, then not ok) on
// a goroutine it owns; the returned func waits for that sample.
func (m *cpuMeter) sampleAt(ctx context.Context, t time.Time) func() cpuSample {
	var s cpuSample
	done := make(chan struct{})
	go func() {
		defer close(done)
		select {
		case <-time.After(time.Until(t)):
			s = m.sample()
		case <-ctx.Done():
		}
	}()
	return func() cpuSample { <-done; return s }
}

// peakRSS returns the measured process's VmHWM in KiB.
func (m *cpuMeter) peakRSS() (int64, bool) {
	pid := m.pid
	switch {
	case pid < 0:
		return 0, false
	case pid == 0:
		pid = os.Getpid()
	}
	v, err := procStatusKB(pid, "VmHWM")
	return v, err == nil
}

func (b browserRT) segment(ctx context.Context, id engine.Identity, segmentID string, scopes map[string][]string) ([]byte, error) {
	return httpRT{url: b.url, hc: b.hc}.segment(ctx, id, segmentID, scopes)
}
