package segstore

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"

	"github.com/klauspost/compress/zstd"
	"go.uber.org/zap"
)

// Encoded forms: a segment downloaded by a client accepting zstd or gzip
// is served from its compressed form, built once from the segment's bytes
// on its first such download and stored beside them under the same id
// (the id still names the uncompressed bytes). A form goes with the bytes
// it was built from (sweep, eviction, a spoiled file) and counts against
// the store quota.

// The encodings a form may be stored in (Content-Encoding tokens).
const (
	EncodingZstd = "zstd"
	EncodingGzip = "gzip"
)

// ErrNoForms: the store keeps no encoded forms (it is not a FormStore);
// the caller compresses the download itself.
var ErrNoForms = errors.New("segstore: the segment store keeps no encoded forms")

// FormStore is implemented by a Store that keeps encoded forms of its
// segments beside their bytes (Memory, sqlitefile.Store, pgseg.Store).
// Held reports a segment's bytes with its forms'; dropping a segment's
// bytes (Sweep, Evict, a file found spoiled) drops its forms.
type FormStore interface {
	// PutForm stores data, the enc form of segment id, while the store
	// holds id's bytes; ErrNotFound when it does not (they were dropped
	// meanwhile). A form already stored stays as it is. The store may
	// keep data itself: the caller does not modify it afterwards.
	PutForm(ctx context.Context, id, enc string, data []byte) error
	// OpenForm returns the enc form of segment id, in memory (not to be
	// modified) or as a file open at its start whose length was checked
	// (the caller closes it); ErrNotFound when none is stored (or the one
	// stored was found spoiled, and dropped).
	OpenForm(ctx context.Context, id, enc string) ([]byte, *os.File, error)
	// DropForm removes the enc form of segment id, if one is stored.
	DropForm(ctx context.Context, id, enc string) error
}

// ValidEncoding reports whether enc is an encoding forms are kept in.
func ValidEncoding(enc string) bool { return enc == EncodingZstd || enc == EncodingGzip }

// Form is an encoded form of a segment as Cache.Form hands it out: its
// bytes in Data (shared, not to be modified) or File (open at its start;
// Close it), Size of them.
type Form struct {
	Encoding string
	Data     []byte
	File     *os.File
	Size     int64
	// Stored: the form is in the store, so later downloads send it as
	// it is. False when this download built it and the store did not
	// keep it (the quota refused it, or the store failed): built for this
	// download (and those waiting on its build) only.
	Stored bool
}

// Close releases the form's file, if it has one.
func (f *Form) Close() error {
	if f == nil || f.File == nil {
		return nil
	}
	file := f.File
	f.File = nil
	return file.Close()
}

// Encoders of the forms: the fastest level of each codec, as the
// per-answer compression of /sync uses, so a segment's first compressed
// download costs what every one did before forms were stored, and the
// bytes on the wire are as before. Default levels were tried on a 10 MB
// rows segment: zstd's sent 3.58 MB instead of 3.78, gzip's 3.24 MB
// instead of 4.13, for a first download several times as slow (gzip's
// about 0.7 s instead of 0.1 s), which every download of a storm waits on.
var (
	formZstd = sync.Pool{New: func() any {
		zw, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1))
		if err != nil {
			panic(err) // only for invalid options
		}
		return zw
	}}
	formGzip = sync.Pool{New: func() any {
		zw, _ := gzip.NewWriterLevel(io.Discard, gzip.BestSpeed)
		return zw
	}}
)

// Encode returns the enc form of the size bytes src reads.
func Encode(enc string, src io.Reader, size int64) ([]byte, error) {
	var buf bytes.Buffer
	buf.Grow(int(size/2) + 512)
	var err error
	switch enc {
	case EncodingZstd:
		zw := formZstd.Get().(*zstd.Encoder)
		zw.Reset(&buf)
		_, err = zw.ReadFrom(src)
		if cerr := zw.Close(); err == nil {
			err = cerr
		}
		zw.Reset(nil)
		formZstd.Put(zw)
	case EncodingGzip:
		zw := formGzip.Get().(*gzip.Writer)
		zw.Reset(&buf)
		_, err = io.Copy(zw, src)
		if cerr := zw.Close(); err == nil {
			err = cerr
		}
		zw.Reset(io.Discard)
		formGzip.Put(zw)
	default:
		return nil, fmt.Errorf("segstore: no form in encoding %q", enc)
	}
	if err != nil {
		return nil, fmt.Errorf("segstore: encode %s: %w", enc, err)
	}
	return buf.Bytes(), nil
}

// FormHolds reports whether r, read to its end, is an enc form that
// decodes to the bytes named id (a store checks a form file read back
// from disk with it).
func FormHolds(enc string, r io.Reader, id string) (bool, error) {
	var dec io.Reader
	switch enc {
	case EncodingZstd:
		zr, err := zstd.NewReader(r, zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true))
		if err != nil {
			return false, nil
		}
		defer zr.Close()
		dec = zr
	case EncodingGzip:
		zr, err := gzip.NewReader(r)
		if err != nil {
			return false, nil
		}
		dec = zr
	default:
		return false, nil
	}
	h := sha256.New()
	if _, err := io.Copy(h, dec); err != nil {
		return false, nil // not a complete, well-formed form
	}
	return "sha256:"+hex.EncodeToString(h.Sum(nil)) == id, nil
}

// formFlight is one build of a form, which concurrent first downloads of
// the same segment and encoding wait for.
type formFlight struct {
	done chan struct{}
	form Form // Data, never File
	err  error
}

// Form returns segment id's enc form, building it once from the segment's
// size bytes (src, called at most once) and storing it when the store
// keeps forms (FormStore). Concurrent first downloads of one segment and
// encoding build it once: the others wait and share the built bytes. A
// form the quota refuses (every other stored segment pinned), or the
// store fails to keep, is still returned (Stored false) for this
// download; the next builds it again. ErrNoForms when the store keeps no
// forms, or another error when the store cannot be read: the caller then
// compresses the download itself (a download never fails for want of a
// form).
//
// partition is the one the download was authorized in (as for Open): when
// the hot set keeps the segment there, the stored form is kept with it and
// read from memory by the later downloads (see StoredForm).
func (c *Cache) Form(ctx context.Context, partition, id, enc string, size int64, src func() io.Reader) (Form, error) {
	fs, ok := c.store.(FormStore)
	if !ok {
		return Form{}, ErrNoForms
	}
	if !ValidEncoding(enc) {
		return Form{}, fmt.Errorf("segstore: no form in encoding %q", enc)
	}
	key := hotKey(partition, id)
	if f, err := c.storedForm(ctx, fs, key, id, enc); !errors.Is(err, ErrNotFound) {
		return f, err
	}
	fkey := id + "\x00" + enc
	c.mu.Lock()
	if fl := c.forms[fkey]; fl != nil {
		c.mu.Unlock()
		select {
		case <-fl.done:
		case <-ctx.Done():
			return Form{}, ctx.Err()
		}
		switch {
		case errors.Is(fl.err, errRetryForm):
			return c.openForm(ctx, fs, id, enc)
		case fl.err != nil:
			return Form{}, fl.err
		}
		c.formsServed.Add(1)
		return fl.form, nil
	}
	fl := &formFlight{done: make(chan struct{})}
	if c.forms == nil {
		c.forms = map[string]*formFlight{}
	}
	c.forms[fkey] = fl
	c.mu.Unlock()
	var out Form
	var err error
	defer func() {
		c.mu.Lock()
		delete(c.forms, fkey)
		c.mu.Unlock()
		fl.form, fl.err = out, err
		if out.File != nil {
			// Waiters get the bytes, not this download's file.
			fl.err = errRetryForm
		}
		close(fl.done)
	}()
	// Look again now that this call owns the flight: a flight that ended
	// just before may have stored it.
	if out, err = c.openForm(ctx, fs, id, enc); !errors.Is(err, ErrNotFound) {
		return out, err
	}
	data, err := Encode(enc, src(), size)
	if err != nil {
		return Form{}, err
	}
	c.formsBuilt.Add(1)
	out = Form{Encoding: enc, Data: data, Size: int64(len(data))}
	// Kept even when this download's client has gone: the form serves
	// the next ones.
	ctx = context.WithoutCancel(ctx)
	if perr := fs.PutForm(ctx, id, enc, data); perr != nil {
		if !errors.Is(perr, ErrNotFound) {
			c.log.Warn("storing a segment's encoded form failed; sent unstored", zap.String("segment", id), zap.String("encoding", enc), zap.Error(perr))
		}
		c.formsUnstored.Add(1)
		return out, nil
	}
	if qerr := c.enforceQuotaForm(ctx, fs, id, enc, out.Size); qerr != nil {
		if !errors.Is(qerr, ErrFull) {
			c.log.Warn("segment store quota pass failed", zap.Error(qerr))
		} else {
			c.formsUnstored.Add(1)
			return out, nil
		}
	}
	out.Stored = true
	if c.hot.holds(key, out.Size) {
		// The segment is hot: its later compressed downloads are served
		// from memory. What is kept is read back from the store (one
		// read, here), so it is exactly the stored form even when
		// another process stored its own first.
		tok := c.hot.token()
		if data, file, err := fs.OpenForm(ctx, id, enc); err == nil {
			if sf, err := storedFormOf(enc, data, file); err == nil {
				if kf, err := c.keepForm(key, tok, sf); err == nil {
					return kf, nil
				}
			}
		}
	}
	return out, nil
}

// storedForm returns the stored enc form of segment id: from the hot set
// when it keeps it with the segment of key, else from the store (counted
// served either way), kept in the hot set when the segment is. ErrNotFound
// when none is stored.
func (c *Cache) storedForm(ctx context.Context, fs FormStore, key, id, enc string) (Form, error) {
	if data, ok := c.hot.getForm(key, enc, c.now().UnixMilli()); ok {
		c.formsServed.Add(1)
		return Form{Encoding: enc, Data: data, Size: int64(len(data)), Stored: true}, nil
	}
	tok := c.hot.token()
	f, err := c.openForm(ctx, fs, id, enc)
	if err != nil || !c.hot.holds(key, f.Size) {
		return f, err
	}
	return c.keepForm(key, tok, f)
}

// keepForm offers f, read from the store after tok (hotSet.token), to the
// hot set with the segment of key, first reading its file, if it has one,
// into memory (and closing it): the form returned holds Data.
func (c *Cache) keepForm(key string, tok uint64, f Form) (Form, error) {
	if f.File != nil {
		data := make([]byte, f.Size)
		_, err := io.ReadFull(f.File, data)
		_ = f.Close()
		if err != nil {
			return Form{}, fmt.Errorf("segstore: read form file: %w", err)
		}
		f.Data = data
	}
	c.hot.offerForm(key, tok, f.Encoding, f.Data)
	return f, nil
}

// errRetryForm is never returned by Form: a waiter whose leader found the
// form stored (so holds a file, not bytes) opens it itself.
var errRetryForm = errors.New("segstore: form stored meanwhile")

// openForm reads a stored form (ErrNotFound when there is none) and
// counts it served.
func (c *Cache) openForm(ctx context.Context, fs FormStore, id, enc string) (Form, error) {
	data, file, err := fs.OpenForm(ctx, id, enc)
	if err != nil {
		return Form{}, err
	}
	f, err := storedFormOf(enc, data, file)
	if err == nil {
		c.formsServed.Add(1)
	}
	return f, err
}

// storedFormOf is the Form of what FormStore.OpenForm returned: its size
// is the file's when it is a file (closed on error).
func storedFormOf(enc string, data []byte, file *os.File) (Form, error) {
	f := Form{Encoding: enc, Data: data, File: file, Size: int64(len(data)), Stored: true}
	if file != nil {
		st, err := file.Stat()
		if err != nil {
			_ = file.Close()
			return Form{}, fmt.Errorf("segstore: form file: %w", err)
		}
		f.Size = st.Size()
	}
	return f, nil
}

// PublicationReader is implemented by a Store that can list a segment's
// publications without reading its bytes (sqlitefile.Store, pgseg.Store):
// a download sent as a stored form is authorized from them alone.
type PublicationReader interface {
	// Publications answers like Store.Get without the bytes: every
	// publication of segment id in partition ("" for any), live or not,
	// Live meaning unexpired at nowMs with the segment's bytes held.
	// ErrNotFound when there is none.
	Publications(ctx context.Context, partition, id string, nowMs int64) ([]Publication, error)
}

// Publications returns every publication of segment id in partition (""
// for every partition), live or not, without reading the segment's bytes:
// from the hot set when it keeps them (Kept set, as Open), else from the
// store. ErrNoForms when the store keeps no forms or cannot list
// publications alone (the caller opens the segment instead), ErrNotFound
// when id has no publication in partition. Pubs is all it fills in: a
// caller serving a stored form authorizes from them and then reads the
// form (StoredForm).
func (c *Cache) Publications(ctx context.Context, partition, id string) (Opened, error) {
	if _, ok := c.store.(FormStore); !ok {
		return Opened{}, ErrNoForms
	}
	nowMs := c.now().UnixMilli()
	if pubs, _, ok := c.hot.get(hotKey(partition, id), nowMs); ok {
		return Opened{Pubs: pubs, Kept: true}, nil
	}
	pr, ok := c.store.(PublicationReader)
	if !ok {
		return Opened{}, ErrNoForms
	}
	pubs, err := pr.Publications(ctx, partition, id, nowMs)
	if err != nil {
		return Opened{}, err
	}
	return Opened{Pubs: pubs}, nil
}

// StoredForm returns segment id's enc form when the store holds one
// (checked as OpenForm checks it), counting it served and the segment
// used (quota recency); ErrNotFound when none is stored, ErrNoForms when
// the store keeps none. It never builds one (Form does).
//
// When the hot set keeps the segment in partition (the partition the
// download was authorized in, as for Publications), its form is kept with
// it: the first such download reads it from the store, the later ones from
// memory (the same bytes, so the same length), until the segment leaves
// the hot set (eviction, expiry, Forget, Sweep or Evict of the segment).
func (c *Cache) StoredForm(ctx context.Context, partition, id, enc string) (Form, error) {
	fs, ok := c.store.(FormStore)
	if !ok {
		return Form{}, ErrNoForms
	}
	if !ValidEncoding(enc) {
		return Form{}, fmt.Errorf("segstore: no form in encoding %q", enc)
	}
	f, err := c.storedForm(ctx, fs, hotKey(partition, id), id, enc)
	if err == nil {
		c.touch(id, false)
	}
	return f, err
}
