package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/transport/httperr"
	"github.com/synclane/synclane/transport/httpsync"
	"github.com/synclane/synclane/transport/httpsync/httpsynctest"
)

// bigpushShape is the push every client of the bigpush workload sends:
// 500 one-operation commits of 40 KB (20 MB), the official client's
// outbox cut at 500 operations.
var bigpushShape = httpsynctest.LargePush{Commits: 500, OpsPerCommit: 1, TitleBytes: 40_000}

// runBigPush: --writers clients (default 64) each POST one 20 MB push at
// once to the server at --url, as the official client would, resending
// after Retry-After when answered 503 (the in-flight body budget), until
// every push is applied. It reports the server's peak RSS (VmHWM of
// --server-pid) against its RSS before the run, the peak of the budget in
// use (sampled from /metrics) and the refusals. Only --url: the point is a
// real `synclane serve` process with its default flags.
func runBigPush(ctx context.Context, cfg *Config, _ string) ([]Result, error) {
	if cfg.Mode != ModeURL || cfg.ServerPID <= 0 {
		if cfg.Workload == "bigpush" {
			return nil, errors.New("bigpush needs --url and --server-pid (a `synclane serve` process with its default flags)")
		}
		return nil, nil // part of "all" in another mode: nothing to measure
	}
	r := Result{Workload: "bigpush", Case: fmt.Sprintf("%d concurrent %s pushes (%d MB each)", cfg.Writers, bigpushShape, bigpushShape.Bytes()/1_000_000),
		Store: "remote", Mode: string(cfg.Mode), Params: map[string]any{"clients": cfg.Writers}}
	hc := newHTTPClient()
	syncU := syncURL(cfg.URL)
	metricsURL, err := url.Parse(syncU)
	if err != nil {
		return nil, err
	}
	metricsURL.Path = "/metrics"
	partition := "bench-" + randHex(4) + "-bigpush"
	header := http.Header{"X-Actor": {"bigpush"}, "X-Partition": {partition}}
	bodies := make([][]byte, cfg.Writers)
	for i := range bodies {
		id := "bigpush-" + strconv.Itoa(i)
		c := &httpsync.Client{URL: syncU, HTTP: hc, ClientID: id, Header: header}
		if err := c.Handshake(ctx); err != nil {
			return nil, fmt.Errorf("handshake: %w", err)
		}
		epoch := c.Epoch
		frames := []ssp2.Frame{&ssp2.ReqHeader{ClientID: id, SchemaVersion: 1, LogEpoch: &epoch}}
		for _, cm := range bigpushShape.Build(id, "big") {
			frames = append(frames, cm)
		}
		if bodies[i], err = ssp2.Encode(&ssp2.Message{WireVersion: ssp2.WireV3, Kind: ssp2.KindRequest, Frames: frames}); err != nil {
			return nil, err
		}
	}
	baseRSS, err := procStatusKB(cfg.ServerPID, "VmRSS")
	if err != nil {
		return nil, err
	}
	var peakInUse, limit atomic.Int64
	stop := make(chan struct{})
	var sampler sync.WaitGroup
	sampler.Add(1)
	go func() { // the budget in use, as /metrics reports it
		defer sampler.Done()
		for {
			if v, l, ok := inflightGauges(ctx, hc, metricsURL.String()); ok {
				limit.Store(l)
				if v > peakInUse.Load() {
					peakInUse.Store(v)
				}
			}
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	var refused, failed atomic.Int64
	var firstErr atomic.Value
	start := time.Now()
	runWorkers(cfg.Writers, func(i int) {
		for ctx.Err() == nil {
			status, retryAfter, data, err := postBody(ctx, hc, syncU, header, bodies[i])
			switch {
			case err != nil:
				failed.Add(1)
				firstErr.CompareAndSwap(nil, err)
				return
			case status == http.StatusServiceUnavailable:
				refused.Add(1)
				select { // the client waits as told, then resends
				case <-time.After(retryAfter):
				case <-ctx.Done():
				}
				continue
			case status != http.StatusOK:
				failed.Add(1)
				firstErr.CompareAndSwap(nil, fmt.Errorf("HTTP %d: %s", status, bytes.TrimSpace(data)))
				return
			}
			m, err := ssp2.DecodeResponse(data)
			if err == nil {
				for _, pr := range httpsync.PushResults(m) {
					if pr.Status != ssp2.CommitApplied && pr.Status != ssp2.CommitCached {
						err = fmt.Errorf("commit %s: %v", pr.ClientCommitID, pr.Status)
					}
				}
			}
			if err != nil {
				failed.Add(1)
				firstErr.CompareAndSwap(nil, err)
			}
			return
		}
	})
	elapsed := time.Since(start)
	close(stop)
	sampler.Wait()
	hwm, err := procStatusKB(cfg.ServerPID, "VmHWM")
	if err != nil {
		return nil, err
	}
	mb := func(kb int64) float64 { return float64(kb) / 1024 }
	r.add("wall time", "s", elapsed.Seconds())
	r.add("pushes applied", "", float64(int64(cfg.Writers)-failed.Load()))
	r.add("503 answers (resent)", "", float64(refused.Load()))
	r.add("server RSS before", "MiB", mb(baseRSS))
	r.add("server peak RSS (VmHWM)", "MiB", mb(hwm))
	r.add("server peak RSS growth", "MiB", mb(hwm-baseRSS))
	r.add("peak budget in use (sampled)", "MiB", float64(peakInUse.Load())/(1<<20))
	r.add("budget", "MiB", float64(limit.Load())/(1<<20))
	r.add("bodies sent at once", "MiB", float64(int64(cfg.Writers)*int64(len(bodies[0])))/(1<<20))
	if e, ok := firstErr.Load().(error); ok {
		r.Notes = append(r.Notes, "first error: "+e.Error())
		return []Result{r}, fmt.Errorf("%d pushes failed: %w", failed.Load(), e)
	}
	return []Result{r}, nil
}

// postBody POSTs body and returns the status, the Retry-After delay (1 s
// when absent) and the answer.
func postBody(ctx context.Context, hc *http.Client, u string, h http.Header, body []byte) (int, time.Duration, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(body))
	if err != nil {
		return 0, 0, nil, err
	}
	for k, v := range h {
		req.Header[k] = v
	}
	req.Header.Set("Content-Type", httpsync.ContentType)
	res, err := hc.Do(req)
	if err != nil {
		return 0, 0, nil, err
	}
	defer res.Body.Close()
	data, err := io.ReadAll(res.Body)
	if err != nil {
		return 0, 0, nil, err
	}
	retry := time.Second
	if s, err := strconv.Atoi(res.Header.Get("Retry-After")); err == nil && s >= 0 {
		retry = time.Duration(s) * time.Second
	}
	if res.StatusCode == http.StatusServiceUnavailable {
		var eb httperr.Body
		if json.Unmarshal(data, &eb) != nil || !eb.Retryable {
			return res.StatusCode, 0, data, fmt.Errorf("503 that is not a retryable protocol error: %s", data)
		}
	}
	return res.StatusCode, retry, data, nil
}

// inflightGauges reads synclane_inflight_body_bytes and its limit from the
// server's /metrics.
func inflightGauges(ctx context.Context, hc *http.Client, u string) (inUse, limit int64, ok bool) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return 0, 0, false
	}
	res, err := hc.Do(req)
	if err != nil {
		return 0, 0, false
	}
	defer res.Body.Close()
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	n := 0
	for sc.Scan() {
		name, v, found := strings.Cut(sc.Text(), " ")
		if !found {
			continue
		}
		switch name {
		case "synclane_inflight_body_bytes": // promhttp writes 1048576 as 1.048576e+06
			f, _ := strconv.ParseFloat(v, 64)
			inUse = int64(f)
			n++
		case "synclane_inflight_body_limit_bytes":
			f, _ := strconv.ParseFloat(v, 64)
			limit = int64(f)
			n++
		}
	}
	return inUse, limit, n == 2
}

// procStatusKB reads a "<field>: N kB" line of /proc/<pid>/status.
func procStatusKB(pid int, field string) (int64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		var v int64
		if _, err := fmt.Sscanf(line, field+": %d kB", &v); err == nil {
			return v, nil
		}
	}
	return 0, fmt.Errorf("no %s in /proc/%d/status", field, pid)
}
