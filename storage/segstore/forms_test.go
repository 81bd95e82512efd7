package segstore_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/synclane/synclane/storage/segstore"
)

// decodeForm decodes an encoded form.
func decodeForm(t *testing.T, enc string, b []byte) []byte {
	t.Helper()
	var r io.Reader
	switch enc {
	case segstore.EncodingZstd:
		zr, err := zstd.NewReader(bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		defer zr.Close()
		r = zr
	case segstore.EncodingGzip:
		zr, err := gzip.NewReader(bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		r = zr
	}
	out, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("decode %s form: %v", enc, err)
	}
	return out
}

// formBytes reads a form's bytes (and closes its file).
func formBytes(t *testing.T, f segstore.Form) []byte {
	t.Helper()
	defer f.Close()
	if f.File == nil {
		if int64(len(f.Data)) != f.Size {
			t.Fatalf("form size %d, %d bytes", f.Size, len(f.Data))
		}
		return f.Data
	}
	b, err := io.ReadAll(f.File)
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(b)) != f.Size {
		t.Fatalf("form size %d, file %d bytes", f.Size, len(b))
	}
	return b
}

// rowsLike returns n compressible bytes.
func rowsLike(n int, seed int) []byte {
	var b bytes.Buffer
	for i := 0; b.Len() < n; i++ {
		fmt.Fprintf(&b, "row %d of %d: title %d\n", i, seed, i*7%13)
	}
	return b.Bytes()[:n]
}

func src(data []byte, calls *int) func() io.Reader {
	return func() io.Reader {
		if calls != nil {
			*calls++
		}
		return bytes.NewReader(data)
	}
}

// TestFormsBuiltOnce: on every store a segment's zstd and gzip forms
// decode to its bytes, are built on the first request in each encoding
// and stored (the second request builds nothing and gets the same bytes),
// count in the quota's store bytes, and go with the segment's bytes when
// the sweep drops them.
func TestFormsBuiltOnce(t *testing.T) {
	for name, open := range backends(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			clk := &clock{}
			clk.ms.Store(1_000_000)
			store := open(t)
			c := segstore.NewCache(store, time.Hour, clk.now, nil)
			if err := c.SetQuota(segstore.Quota{MaxBytes: 1 << 30}); err != nil {
				t.Fatal(err)
			}
			data := rowsLike(200_000, 1)
			m, _, err := c.Obtain(ctx, "p", pageKey("todos", "d"), builder("todos", "d", data))
			if err != nil {
				t.Fatal(err)
			}
			sizes := int64(0)
			for i, enc := range []string{segstore.EncodingZstd, segstore.EncodingGzip} {
				calls := 0
				f, err := c.Form(ctx, "p", m.ID, enc, int64(len(data)), src(data, &calls))
				if err != nil || !f.Stored || f.Encoding != enc {
					t.Fatalf("%s: first form %v stored=%v", enc, err, f.Stored)
				}
				first := bytes.Clone(formBytes(t, f))
				if got := decodeForm(t, enc, first); !bytes.Equal(got, data) {
					t.Fatalf("%s form decodes to %d other bytes", enc, len(got))
				}
				if len(first) >= len(data)/2 {
					t.Fatalf("%s form of compressible rows: %d of %d bytes", enc, len(first), len(data))
				}
				f, err = c.Form(ctx, "p", m.ID, enc, int64(len(data)), src(data, &calls))
				if err != nil || !f.Stored {
					t.Fatalf("%s: second form %v", enc, err)
				}
				if again := formBytes(t, f); !bytes.Equal(again, first) {
					t.Fatalf("%s: the stored form differs from the built one", enc)
				}
				if st := c.Stats(); calls != 1 || st.FormsBuilt != uint64(i+1) || st.FormsServed != uint64(i+1) || st.FormsUnstored != 0 {
					t.Fatalf("%s: src read %d times, stats %+v", enc, calls, st)
				}
				sizes += int64(len(first))
			}
			if err := c.EnforceQuota(ctx); err != nil {
				t.Fatal(err)
			}
			if qs := c.QuotaStats(); qs.StoreBytes != int64(len(data))+sizes || qs.StoreFiles != 1 {
				t.Fatalf("quota stats %+v, want %d bytes (segment %d + forms %d) in 1 segment", qs, int64(len(data))+sizes, len(data), sizes)
			}
			// The sweep drops the bytes: the forms go with them.
			clk.ms.Add(time.Hour.Milliseconds())
			if n, err := c.Sweep(ctx); err != nil || n != 1 {
				t.Fatalf("sweep: %d %v", n, err)
			}
			for _, enc := range []string{segstore.EncodingZstd, segstore.EncodingGzip} {
				if _, _, err := store.(segstore.FormStore).OpenForm(ctx, m.ID, enc); !errors.Is(err, segstore.ErrNotFound) {
					t.Fatalf("%s form after the sweep: %v, want ErrNotFound", enc, err)
				}
				if err := store.(segstore.FormStore).PutForm(ctx, m.ID, enc, []byte("x")); !errors.Is(err, segstore.ErrNotFound) {
					t.Fatalf("%s form put without bytes: %v, want ErrNotFound", enc, err)
				}
			}
		})
	}
}

// TestFormStormBuildsOnce: concurrent first downloads of one segment in
// one encoding build its form once; every one gets bytes that decode to
// the segment.
func TestFormStormBuildsOnce(t *testing.T) {
	for name, open := range backends(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			c := segstore.NewCache(open(t), time.Hour, nil, nil)
			data := rowsLike(300_000, 2)
			m, _, err := c.Obtain(ctx, "p", pageKey("todos", "d"), builder("todos", "d", data))
			if err != nil {
				t.Fatal(err)
			}
			const n = 32
			var ready sync.WaitGroup
			ready.Add(n)
			var mu sync.Mutex
			calls := 0
			// The build's source waits until every download has started,
			// so they overlap the build.
			slow := func() io.Reader {
				mu.Lock()
				calls++
				mu.Unlock()
				ready.Wait()
				return bytes.NewReader(data)
			}
			forms := make([][]byte, n)
			errs := make([]error, n)
			var done sync.WaitGroup
			for i := range n {
				done.Add(1)
				go func() {
					defer done.Done()
					ready.Done()
					f, err := c.Form(ctx, "p", m.ID, segstore.EncodingZstd, int64(len(data)), slow)
					if err != nil {
						errs[i] = err
						return
					}
					defer f.Close()
					if f.File != nil {
						forms[i], errs[i] = io.ReadAll(f.File)
					} else {
						forms[i] = f.Data
					}
				}()
			}
			done.Wait()
			for i := range n {
				if errs[i] != nil {
					t.Fatalf("download %d: %v", i, errs[i])
				}
				if got := decodeForm(t, segstore.EncodingZstd, forms[i]); !bytes.Equal(got, data) {
					t.Fatalf("download %d: the form decodes to other bytes", i)
				}
			}
			if st := c.Stats(); calls != 1 || st.FormsBuilt != 1 || st.FormsServed != n-1 {
				t.Fatalf("storm of %d: source read %d times, stats %+v", n, calls, st)
			}
		})
	}
}

// TestFormQuota: a form counts against the store quota. When room can be
// made it evicts the least recently used unpinned segment like a build;
// when it cannot (every other segment pinned) the form is not kept, the
// download still gets it, nothing is evicted for it, and the segment
// itself stays.
func TestFormQuota(t *testing.T) {
	for name, open := range backends(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			clk := &clock{}
			clk.ms.Store(1_000_000)
			store := open(t)
			c := segstore.NewCache(store, time.Hour, clk.now, nil)
			a, b := rowsLike(50_000, 3), rowsLike(50_000, 4)
			// Room for the two segments and 100 bytes more: no form fits.
			if err := c.SetQuota(segstore.Quota{MaxBytes: int64(len(a)+len(b)) + 100, PinFor: time.Minute}); err != nil {
				t.Fatal(err)
			}
			ma, _, err := c.Obtain(ctx, "p", pageKey("a", "d"), builder("a", "d", a))
			if err != nil {
				t.Fatal(err)
			}
			clk.ms.Add(1)
			mb, _, err := c.Obtain(ctx, "p", pageKey("b", "d"), builder("b", "d", b))
			if err != nil {
				t.Fatal(err)
			}
			// Both pinned: b's form is refused, sent all the same.
			f, err := c.Form(ctx, "p", mb.ID, segstore.EncodingGzip, int64(len(b)), src(b, nil))
			if err != nil || f.Stored {
				t.Fatalf("form over the quota: %v stored=%v", err, f.Stored)
			}
			if got := decodeForm(t, segstore.EncodingGzip, formBytes(t, f)); !bytes.Equal(got, b) {
				t.Fatal("the refused form decodes to other bytes")
			}
			if _, _, err := store.(segstore.FormStore).OpenForm(ctx, mb.ID, segstore.EncodingGzip); !errors.Is(err, segstore.ErrNotFound) {
				t.Fatalf("the refused form was kept: %v", err)
			}
			for _, id := range []string{ma.ID, mb.ID} {
				if _, _, err := c.Get(ctx, "p", id); err != nil {
					t.Fatalf("segment %s after a refused form: %v", id, err)
				}
			}
			if st, qs := c.Stats(), c.QuotaStats(); st.FormsUnstored != 1 || qs.Evicted != 0 || qs.Refused != 0 {
				t.Fatalf("after the refused form: stats %+v quota %+v", st, qs)
			}
			// Pins lapse and b is downloaded again: its form now evicts a,
			// the least recently used.
			clk.ms.Add(2 * time.Minute.Milliseconds())
			if _, _, err := c.Get(ctx, "p", mb.ID); err != nil {
				t.Fatal(err)
			}
			f, err = c.Form(ctx, "p", mb.ID, segstore.EncodingGzip, int64(len(b)), src(b, nil))
			if err != nil || !f.Stored {
				t.Fatalf("form with room to make: %v stored=%v", err, f.Stored)
			}
			_ = f.Close()
			if _, _, err := c.Get(ctx, "p", ma.ID); !errors.Is(err, segstore.ErrExpired) {
				t.Fatalf("segment a: %v, want evicted (ErrExpired)", err)
			}
			if _, _, err := c.Get(ctx, "p", mb.ID); err != nil {
				t.Fatalf("segment b: %v", err)
			}
			if qs := c.QuotaStats(); qs.Evicted != 1 || qs.StoreBytes != int64(len(b))+f.Size || qs.StoreBytes > int64(len(a)+len(b))+100 {
				t.Fatalf("quota %+v, want one eviction and %d bytes", qs, int64(len(b))+f.Size)
			}
			if st := c.Stats(); st.FormsBuilt != 2 || st.FormsUnstored != 1 {
				t.Fatalf("stats %+v", st)
			}
		})
	}
}
