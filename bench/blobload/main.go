// Command blobload measures blob transfers against a real synclane
// process: a large upload (default 1 GiB) with the server's resident
// memory sampled throughout, then the download, next to a plain file copy
// of the same bytes on the same disk, all in one run. It prints one JSON
// object.
//
//	go build -o /tmp/synclane ./cmd/synclane
//	go run ./bench/blobload --bin /tmp/synclane --size 1GiB
package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/transport/httpsync"
)

func main() {
	bin := flag.String("bin", "", "synclane binary (required)")
	size := flag.Int64("size", 1<<30, "blob size in bytes")
	dir := flag.String("dir", "", "working directory (default: a temporary one, removed)")
	flag.Parse()
	if *bin == "" {
		fmt.Fprintln(os.Stderr, "blobload: --bin is required")
		os.Exit(2)
	}
	if err := run(*bin, *size, *dir); err != nil {
		fmt.Fprintln(os.Stderr, "blobload:", err)
		os.Exit(1)
	}
}

// result is the printed report.
type result struct {
	SizeBytes         int64   `json:"sizeBytes"`
	BaselineRSSMB     float64 `json:"serverBaselineRSSMB"`
	PeakRSSDuringMB   float64 `json:"serverPeakRSSDuringUploadMB"`
	PeakRSSDeltaMB    float64 `json:"serverPeakRSSDeltaMB"`
	UploadMBps        float64 `json:"uploadMBps"`
	DownloadMBps      float64 `json:"downloadMBps"`
	FileCopyMBps      float64 `json:"fileCopyMBps"`
	FileCopyFirstMBps float64 `json:"fileCopyBeforeUploadMBps"`
	UploadVsCopy      float64 `json:"uploadOverFileCopy"`
	DownloadVsCopy    float64 `json:"downloadOverFileCopy"`
	RSSSamples        int     `json:"rssSamples"`
}

func run(bin string, size int64, dir string) error {
	if dir == "" {
		d, err := os.MkdirTemp("", "blobload-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(d)
		dir = d
	}
	ctx := context.Background()
	src := filepath.Join(dir, "source.bin")
	id, err := writeSource(src, size)
	if err != nil {
		return err
	}
	schemaFile := filepath.Join(dir, "schema.json")
	if err := os.WriteFile(schemaFile, []byte(benchSchema), 0o600); err != nil {
		return err
	}
	addr, err := freeAddr()
	if err != nil {
		return err
	}
	cmd := exec.Command(bin, "serve", "--listen", addr, "--data", filepath.Join(dir, "data"), "--schema", schemaFile, "--log-level", "warn",
		"--max-blob-bytes", strconv.FormatInt(size, 10), "--read-timeout", "30s", "--write-timeout", "60s")
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return err
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	base := "http://" + addr
	if err := waitReady(base); err != nil {
		return err
	}
	c := &httpsync.Client{URL: base + "/sync", ClientID: "bench", Header: http.Header{"X-Actor": {"bench"}}}
	// Warm the server (one small upload) before the baseline.
	small := []byte("warm-up")
	sid := sha256.Sum256(small)
	if err := c.UploadBlob(ctx, "sha256:"+hex.EncodeToString(sid[:]), "", bytes.NewReader(small), int64(len(small))); err != nil {
		return fmt.Errorf("warm-up upload: %w", err)
	}
	// A first plain copy before the upload (the last one runs after the
	// download; both are reported, the ratios use the mean).
	start := time.Now()
	if err := copyFile(src, filepath.Join(dir, "copy0.bin")); err != nil {
		return err
	}
	firstCopy := mbps(size, time.Since(start))
	baseline, err := rssKB(cmd.Process.Pid, "VmRSS")
	if err != nil {
		return err
	}
	r := result{SizeBytes: size, BaselineRSSMB: float64(baseline) / 1024}

	// Upload from the source file while sampling the server's RSS.
	stop := make(chan struct{})
	var peak int64
	var samples int
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			if v, err := rssKB(cmd.Process.Pid, "VmRSS"); err == nil {
				peak = max(peak, v)
				samples++
			}
			select {
			case <-stop:
				return
			case <-t.C:
			}
		}
	})
	f, err := os.Open(src)
	if err != nil {
		return err
	}
	start = time.Now()
	err = c.UploadBlob(ctx, id, "application/octet-stream", bufio.NewReaderSize(f, 1<<20), size)
	up := time.Since(start)
	f.Close()
	close(stop)
	wg.Wait()
	if err != nil {
		return fmt.Errorf("upload: %w", err)
	}
	r.PeakRSSDuringMB, r.RSSSamples = float64(peak)/1024, samples
	r.PeakRSSDeltaMB = float64(peak-baseline) / 1024
	r.UploadMBps = mbps(size, up)

	// Reference the blob so a download is authorized (dev auth: every scope).
	if err := referenceBlob(ctx, c, id, size); err != nil {
		return err
	}
	start = time.Now()
	n, err := c.DownloadBlob(ctx, id, io.Discard)
	down := time.Since(start)
	if err != nil || n != size {
		return fmt.Errorf("download: %d bytes, %v", n, err)
	}
	r.DownloadMBps = mbps(size, down)

	// A plain file copy of the same bytes on the same disk (with fsync, as
	// the filesystem blob store does).
	start = time.Now()
	if err := copyFile(src, filepath.Join(dir, "copy.bin")); err != nil {
		return err
	}
	r.FileCopyMBps, r.FileCopyFirstMBps = mbps(size, time.Since(start)), firstCopy
	meanCopy := (r.FileCopyMBps + r.FileCopyFirstMBps) / 2
	r.UploadVsCopy = r.UploadMBps / meanCopy
	r.DownloadVsCopy = r.DownloadMBps / meanCopy
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

func mbps(n int64, d time.Duration) float64 { return float64(n) / (1 << 20) / d.Seconds() }

// writeSource writes size pseudo-random bytes (incompressible) and returns
// their blob id.
func writeSource(path string, size int64) (string, error) {
	f, err := os.Create(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	rng := rand.NewChaCha8([32]byte{1})
	buf := make([]byte, 1<<20)
	for left := size; left > 0; {
		n := min(left, int64(len(buf)))
		_, _ = rng.Read(buf[:n])
		h.Write(buf[:n])
		if _, err := f.Write(buf[:n]); err != nil {
			return "", err
		}
		left -= n
	}
	if err := f.Sync(); err != nil {
		return "", err
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	defer out.Close()
	if _, err := io.CopyBuffer(out, in, make([]byte, 1<<20)); err != nil {
		return err
	}
	return out.Sync()
}

func rssKB(pid int, field string) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			return strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
		}
	}
	return 0, fmt.Errorf("no %s in /proc/%d/status", field, pid)
}

func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

func waitReady(base string) error {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if res, err := http.Get(base + "/readyz"); err == nil {
			res.Body.Close()
			if res.StatusCode == 200 {
				return nil
			}
		}
		time.Sleep(50 * time.Millisecond) // polling an observable condition with a deadline
	}
	return fmt.Errorf("server at %s not ready within 30s", base)
}

// benchSchema has one table whose rows reference blobs.
const benchSchema = `{"version": 1, "tables": [{"name": "files",
  "columns": [{"name": "id", "type": "string"}, {"name": "list_id", "type": "string"},
    {"name": "file", "type": "blob_ref", "nullable": true}],
  "primaryKey": "id", "scopes": ["list:{list_id}"]}]}`

// referenceBlob pushes a files row referencing blob id.
func referenceBlob(ctx context.Context, c *httpsync.Client, id string, size int64) error {
	sch, err := schema.Parse([]byte(benchSchema))
	if err != nil {
		return err
	}
	codec := ssp2.NewRowCodec(sch.Table("files").Columns)
	ref := fmt.Sprintf(`{"blobId":%q,"byteLength":%d}`, id, size)
	payload, err := codec.AppendSparse(nil, ssp2.Row{"f1", "L1", ref}, nil, 0)
	if err != nil {
		return err
	}
	rs, err := c.Push(ctx, &ssp2.PushCommit{ClientCommitID: "c1", Operations: []ssp2.Operation{{Table: "files", RowID: "f1", Op: ssp2.OpUpsert, Payload: payload}}})
	if err != nil {
		return fmt.Errorf("reference push: %w", err)
	}
	if rs[0].Status != ssp2.CommitApplied {
		return fmt.Errorf("reference push: %+v", rs[0])
	}
	return nil
}
