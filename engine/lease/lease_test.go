package lease

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/storage"
	"github.com/synclane/synclane/storage/memory"
)

var testKey = []byte("0123456789abcdef0123456789abcdef")

// countingStore counts the lease writes reaching the store.
type countingStore struct {
	storage.Leases
	swaps atomic.Int64
}

func (c *countingStore) SwapLease(ctx context.Context, partition string, rec storage.LeaseRecord, prev []byte) (bool, error) {
	c.swaps.Add(1)
	return c.Leases.SwapLease(ctx, partition, rec, prev)
}

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func newStore(t *testing.T) *memory.Store {
	t.Helper()
	st := memory.New()
	s, err := schema.Parse([]byte(`{"version":1,"tables":[{"name":"t","columns":[{"name":"id","type":"string"},{"name":"p","type":"string"}],"primaryKey":"id","scopes":["p:{p}"]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if err := st.EnsureSchema(t.Context(), s); err != nil {
		t.Fatal(err)
	}
	return st
}

func newKeeper(t *testing.T, st storage.Leases, clk *clock, ttl time.Duration) *Keeper {
	t.Helper()
	k, err := New(Config{Store: st, Key: testKey, TTL: ttl, Now: clk.now})
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestNewRefusesBadConfig(t *testing.T) {
	st := newStore(t)
	for _, tc := range []struct {
		name string
		cfg  Config
	}{
		{"no store", Config{Key: testKey, TTL: time.Minute}},
		{"short key", Config{Store: st, Key: testKey[:31], TTL: time.Minute}},
		{"zero TTL", Config{Store: st, Key: testKey}},
		{"TTL too long", Config{Store: st, Key: testKey, TTL: MaxTTL + time.Millisecond}},
	} {
		if _, err := New(tc.cfg); err == nil {
			t.Errorf("%s: accepted", tc.name)
		}
	}
}

// TestSlideWritesOncePerGranularity: rounds closer together than
// TTL/SlideGranularity cost no write; the frame carries the stored expiry.
func TestSlideWritesOncePerGranularity(t *testing.T) {
	cs := &countingStore{Leases: newStore(t)}
	clk := &clock{t: time.UnixMilli(1_000_000)}
	ttl := 64 * time.Second // granularity 1s
	k := newKeeper(t, cs, clk, ttl)
	ctx := context.Background()
	g := map[string][]string{"p": {"b", "a", "a"}}
	first, err := k.Slide(ctx, "part", "c", "actor", g)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 1000 { // 1000 rounds 10ms apart: 10s
		clk.add(10 * time.Millisecond)
		l, err := k.Slide(ctx, "part", "c", "actor", map[string][]string{"p": {"a", "b"}})
		if err != nil || l.LeaseID != first.LeaseID {
			t.Fatalf("round %d: %+v %v", i, l, err)
		}
		rec, _ := cs.GetLease(ctx, "part", "c")
		if rec.ExpiresAtMs != l.ExpiresAtMs {
			t.Fatalf("round %d: sent %d, stored %d", i, l.ExpiresAtMs, rec.ExpiresAtMs)
		}
		if lag := clk.now().UnixMilli() + ttl.Milliseconds() - l.ExpiresAtMs; lag > ttl.Milliseconds()/SlideGranularity {
			t.Fatalf("round %d: expiry lags now+TTL by %dms", i, lag)
		}
	}
	// 1 issue + one slide per second of the 10s, not 1000.
	if n := cs.swaps.Load(); n < 10 || n > 11 {
		t.Fatalf("%d writes for 1001 rounds over 10s at 1s granularity", n)
	}
	// New grants are written at once.
	before := cs.swaps.Load()
	if _, err := k.Slide(ctx, "part", "c", "actor", map[string][]string{"p": {"z"}}); err != nil {
		t.Fatal(err)
	}
	if cs.swaps.Load() != before+1 {
		t.Fatal("changed grants were not written")
	}
	got, err := k.Authorize(ctx, "part", "c", "actor")
	if err != nil || len(got["p"]) != 1 || got["p"][0] != "z" {
		t.Fatalf("Authorize = %v, %v", got, err)
	}
}

func TestAuthorize(t *testing.T) {
	st := newStore(t)
	clk := &clock{t: time.UnixMilli(5_000_000)}
	k := newKeeper(t, st, clk, time.Minute)
	ctx := context.Background()
	if _, err := k.Slide(ctx, "part", "c", "alice", map[string][]string{"p": {"x"}}); err != nil {
		t.Fatal(err)
	}
	other := newKeeper(t, st, clk, time.Minute)
	other.sign = signer{key: []byte("another key, also thirty-two bytes!")}
	for _, tc := range []struct {
		name  string
		k     *Keeper
		actor string
		want  syncerr.Code
	}{
		{"valid", k, "alice", ""},
		{"another actor", k, "bob", syncerr.AuthLeaseRequired},
		{"signed with another key", other, "alice", syncerr.AuthLeaseRequired},
	} {
		g, err := tc.k.Authorize(ctx, "part", "c", tc.actor)
		if tc.want == "" {
			if err != nil || g["p"][0] != "x" {
				t.Errorf("%s: %v %v", tc.name, g, err)
			}
			continue
		}
		if syncerr.CodeOf(err) != tc.want {
			t.Errorf("%s: %v, want %s", tc.name, err, tc.want)
		}
	}
	// A record copied to another client's key fails its MAC.
	rec, _ := st.GetLease(ctx, "part", "c")
	moved := *rec
	moved.ClientID = "d"
	if ok, err := st.SwapLease(ctx, "part", moved, nil); !ok || err != nil {
		t.Fatal(ok, err)
	}
	if _, err := k.Authorize(ctx, "part", "d", "alice"); syncerr.CodeOf(err) != syncerr.AuthLeaseRequired {
		t.Fatalf("copied record: %v", err)
	}
	clk.add(time.Minute)
	if _, err := k.Authorize(ctx, "part", "c", "alice"); syncerr.CodeOf(err) != syncerr.AuthLeaseRequired {
		t.Fatalf("at expiry: %v", err)
	}
}

func TestKeyFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, KeyFileName)
	k1, created, err := LoadOrCreateKeyFile(path)
	if err != nil || !created || len(k1) != MinKeyBytes {
		t.Fatalf("create: %d bytes, %v, %v", len(k1), created, err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode: %v %v", fi, err)
	}
	k2, created, err := LoadOrCreateKeyFile(path)
	if err != nil || created || string(k2) != string(k1) {
		t.Fatalf("reload: %v %v", created, err)
	}
	bad := filepath.Join(dir, "bad.key")
	if err := os.WriteFile(bad, []byte("not hex"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := LoadOrCreateKeyFile(bad); err == nil {
		t.Fatal("a file that is no key was accepted")
	}
	// Concurrent creators end up with one key.
	path2 := filepath.Join(dir, "race.key")
	keys := make([][]byte, 8)
	var wg sync.WaitGroup
	for i := range keys {
		wg.Add(1)
		go func() {
			defer wg.Done()
			k, _, err := LoadOrCreateKeyFile(path2)
			if err != nil {
				t.Error(err)
			}
			keys[i] = k
		}()
	}
	wg.Wait()
	for i := range keys {
		if string(keys[i]) != string(keys[0]) {
			t.Fatalf("creator %d got another key", i)
		}
	}
}

func TestCacheIsBounded(t *testing.T) {
	c := cache{m: map[cacheKey]storage.LeaseRecord{}}
	for i := range MaxCached + 10 {
		c.put(cacheKey{"p", strconv.Itoa(i)}, storage.LeaseRecord{})
	}
	if len(c.m) != MaxCached {
		t.Fatalf("cache holds %d records, limit %d", len(c.m), MaxCached)
	}
}

// FuzzVerify: hostile stored records never panic and never verify unless
// they carry the MAC of their exact content.
func FuzzVerify(f *testing.F) {
	s := signer{key: testKey}
	good := s.sign("p", storage.LeaseRecord{ClientID: "c", LeaseID: "L", ActorID: "a", AllowedScopes: []byte(`{"x":["1"]}`), IssuedAtMs: 1, ExpiresAtMs: 2})
	f.Add("c", "L", "a", good.AllowedScopes, int64(1), int64(2), int64(0), good.MAC)
	f.Add("c", "L", "a", []byte(`[]`), int64(1), int64(2), int64(0), []byte{})
	f.Add("", "", "", []byte(`{"x":null}`), int64(-1), int64(1<<62), int64(7), []byte("mac"))
	f.Fuzz(func(t *testing.T, client, id, actor string, scopes []byte, issued, expires, revoked int64, mac []byte) {
		rec := &storage.LeaseRecord{ClientID: client, LeaseID: id, ActorID: actor, AllowedScopes: scopes, IssuedAtMs: issued, ExpiresAtMs: expires, RevokedAtMs: revoked, MAC: mac}
		_, err := s.verify("p", rec)
		signed := s.sign("p", *rec)
		_, err2 := s.verify("p", &signed)
		if err == nil && err2 != nil {
			t.Fatalf("a record verified before signing but not after: %v", err2)
		}
		if err == nil && !bytes.Equal(mac, signed.MAC) {
			t.Fatal("a record verified with a MAC that is not its own")
		}
		if _, derr := decodeScopes(scopes); (derr == nil) != (err2 == nil) {
			t.Fatalf("signed record: verify %v, decode %v", err2, derr)
		}
	})
}
