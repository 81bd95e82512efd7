package homes_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/synclane/synclane/storage"
	"github.com/synclane/synclane/storage/postgres"
	"github.com/synclane/synclane/storage/postgres/homes"
	"github.com/synclane/synclane/storage/storagetest"
)

// The placement rule: deterministic, even, and a home added takes only
// the partitions it wins (none moves between the old homes).
func TestRendezvous(t *testing.T) {
	two := []string{homes.Main, "b"}
	three := []string{homes.Main, "b", "c"}
	const n = 10000
	count := map[string]int{}
	for i := range n {
		p := fmt.Sprint("tenant-", i)
		got := homes.Rendezvous(two, p)
		if again := homes.Rendezvous([]string{"b", homes.Main}, p); again != got {
			t.Fatalf("%s: %q, %q in the other order", p, got, again)
		}
		count[got]++
		if with := homes.Rendezvous(three, p); with != got && with != "c" {
			t.Fatalf("%s moved from %q to %q when c was added", p, got, with)
		}
	}
	for _, h := range two {
		if c := count[h]; c < n*45/100 || c > n*55/100 {
			t.Errorf("home %s got %d of %d partitions, want 45-55%%", h, c, n)
		}
	}
}

func TestCheckName(t *testing.T) {
	for _, tc := range []struct {
		name string
		ok   bool
	}{{"b", true}, {"eu-west_2", true}, {"0", true}, {"", false}, {"B", false}, {"-x", false}, {"a b", false}, {"x234567890123456789012345678901234", false}} {
		if err := homes.CheckName(tc.name); (err == nil) != tc.ok {
			t.Errorf("CheckName(%q) = %v, want ok %v", tc.name, err, tc.ok)
		}
	}
}

func ensure(t *testing.T, h *homes.Homes) {
	t.Helper()
	if err := h.EnsureSchema(t.Context(), storagetest.MustParse(storagetest.SchemaV1)); err != nil {
		t.Fatal(err)
	}
}

// holders returns the homes whose database holds partition's registry
// row.
func holders(t *testing.T, p place, h *homes.Homes, partition string) []string {
	t.Helper()
	var out []string
	for _, name := range h.Names() {
		var n int
		st := h.Store(name)
		if err := st.Pool().QueryRow(t.Context(), `SELECT count(*) FROM `+pgx.Identifier{st.SchemaName(), "sync_partitions"}.Sanitize()+` WHERE partition = $1`, partition).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			out = append(out, name)
		}
	}
	return out
}

// Two processes placing the same partitions at once agree: the directory
// names one home for each, every partition's data is in that home only,
// and the partitions spread over both homes.
func TestPlacementRace(t *testing.T) {
	dbs := twoDatabases(t)
	p := newPlace(t, dbs)
	a, b := p.open(t, postgres.Options{}), p.open(t, postgres.Options{})
	var wg sync.WaitGroup
	for _, h := range []*homes.Homes{a, b} { // two processes starting at once on fresh databases
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := h.EnsureSchema(t.Context(), storagetest.MustParse(storagetest.SchemaV1)); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	const n = 60
	for _, h := range []*homes.Homes{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range n {
				if _, err := h.TouchPartition(t.Context(), fmt.Sprint("p", i), 1); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	spread := map[string]int{}
	for i := range n {
		part := fmt.Sprint("p", i)
		ha, ga, err := a.HomeOf(t.Context(), part)
		if err != nil {
			t.Fatal(err)
		}
		hb, gb, _ := b.HomeOf(t.Context(), part)
		if ha != hb || ga != 1 || gb != 1 {
			t.Fatalf("%s: %q@%d and %q@%d", part, ha, ga, hb, gb)
		}
		if got := holders(t, p, a, part); len(got) != 1 || got[0] != ha {
			t.Fatalf("%s: held by %v, directory names %q", part, got, ha)
		}
		spread[ha]++
	}
	if spread[homes.Main] == 0 || spread["b"] == 0 {
		t.Fatalf("partitions not spread: %v", spread)
	}
	counts, err := a.Counts(t.Context())
	if err != nil || len(counts) != 2 || counts[0].Partitions+counts[1].Partitions != n {
		t.Fatalf("Counts = %+v, %v", counts, err)
	}
}

// The directory row decides, not the rule: a partition whose row names
// a home (placed by a process with another list of homes, or moved) is
// served there; a home the process is not configured with answers
// ErrHomeUnavailable.
func TestDirectoryDecides(t *testing.T) {
	dbs := twoDatabases(t)
	p := newPlace(t, dbs)
	h := p.open(t, postgres.Options{})
	ensure(t, h)
	var part string
	for i := 0; ; i++ {
		if part = fmt.Sprint("q", i); homes.Rendezvous(h.Names(), part) == homes.Main {
			break
		}
	}
	dir := pgx.Identifier{p.schemas[0], homes.DirectoryTable}.Sanitize()
	if _, err := h.Main().Pool().Exec(t.Context(), `INSERT INTO `+dir+` VALUES ($1, 'b', 1, 0), ('elsewhere', 'zz', 1, 0)`, part); err != nil {
		t.Fatal(err)
	}
	if _, err := h.TouchPartition(t.Context(), part, 1); err != nil {
		t.Fatal(err)
	}
	if got := holders(t, p, h, part); len(got) != 1 || got[0] != "b" {
		t.Fatalf("held by %v, want [b]", got)
	}
	if _, err := h.TouchPartition(t.Context(), "elsewhere", 1); !errors.Is(err, storage.ErrHomeUnavailable) {
		t.Fatalf("partition of an unknown home: %v, want ErrHomeUnavailable", err)
	}
	// Relocate is a compare-and-swap on the generation.
	gen, err := h.Relocate(t.Context(), part, homes.Main, 1)
	if err != nil || gen != 2 {
		t.Fatalf("Relocate = %d, %v", gen, err)
	}
	if _, err := h.Relocate(t.Context(), part, "b", 1); !errors.Is(err, homes.ErrGenerationChanged) {
		t.Fatalf("Relocate from a stale generation: %v", err)
	}
}

// A database already serving as a home is refused as another one, and
// a home of another deployment too.
func TestIdentity(t *testing.T) {
	dbs := twoDatabases(t)
	p := newPlace(t, dbs)
	ensure(t, p.open(t, postgres.Options{}))
	// b's database named c.
	renamed := place{names: []string{homes.Main, "c"}, urls: p.urls, schemas: p.schemas}
	if err := renamed.open(t, postgres.Options{}).EnsureSchema(t.Context(), storagetest.MustParse(storagetest.SchemaV1)); !errors.Is(err, homes.ErrIdentity) {
		t.Fatalf("home b opened as c: %v, want ErrIdentity", err)
	}
	// main's database as a second home.
	twice := place{names: []string{homes.Main, "b"}, urls: []string{p.urls[0], p.urls[0]}, schemas: []string{p.schemas[0], p.schemas[0]}}
	if err := twice.open(t, postgres.Options{}).EnsureSchema(t.Context(), storagetest.MustParse(storagetest.SchemaV1)); !errors.Is(err, homes.ErrIdentity) {
		t.Fatalf("main's database as home b: %v, want ErrIdentity", err)
	}
	// b with another deployment's main.
	other := place{names: []string{homes.Main, "b"}, urls: p.urls, schemas: []string{newSchema(t, p.urls[0]), p.schemas[1]}}
	if err := other.open(t, postgres.Options{}).EnsureSchema(t.Context(), storagetest.MustParse(storagetest.SchemaV1)); !errors.Is(err, homes.ErrIdentity) {
		t.Fatalf("home b of another deployment: %v, want ErrIdentity", err)
	}
}

// A database that served alone becomes main with its partitions: they
// are adopted into the directory (naming main) and keep their data,
// whatever home the rule would give them.
func TestAdoption(t *testing.T) {
	dbs := twoDatabases(t)
	p := newPlace(t, dbs)
	ctx := t.Context()
	alone := openStore(t, p.urls[0], p.schemas[0], postgres.Options{})
	if err := alone.EnsureSchema(ctx, storagetest.MustParse(storagetest.SchemaV1)); err != nil {
		t.Fatal(err)
	}
	epochs := map[string]string{}
	for i := range 20 {
		part := fmt.Sprint("old-", i)
		info, err := alone.TouchPartition(ctx, part, 1)
		if err != nil {
			t.Fatal(err)
		}
		epochs[part] = info.LogEpoch
	}
	_ = alone.Close()
	h := p.open(t, postgres.Options{})
	ensure(t, h)
	for part, ep := range epochs {
		home, gen, err := h.HomeOf(ctx, part)
		if err != nil || home != homes.Main || gen != 1 {
			t.Fatalf("%s: %q@%d, %v; want main@1", part, home, gen, err)
		}
		info, err := h.ReadPartition(ctx, part)
		if err != nil || !info.Exists || info.LogEpoch != ep {
			t.Fatalf("%s: %+v, %v; want epoch %s", part, info, err, ep)
		}
	}
}

// A home that cannot be reached fails the calls of its partitions with
// ErrHomeUnavailable; main's partitions are served meanwhile, and the
// spanning calls that skip it (ClaimReactions) go on.
func TestUnreachableHome(t *testing.T) {
	dbs := twoDatabases(t)
	p := newPlace(t, dbs)
	h := p.open(t, postgres.Options{})
	ensure(t, h)
	ctx := context.Background()
	var onMain, onB string
	for i := 0; onMain == "" || onB == ""; i++ {
		part := fmt.Sprint("u", i)
		if homes.Rendezvous(h.Names(), part) == homes.Main {
			onMain = part
		} else {
			onB = part
		}
	}
	for _, part := range []string{onMain, onB} {
		if _, err := h.TouchPartition(ctx, part, 1); err != nil {
			t.Fatal(err)
		}
	}
	dbs[1].refuseConnections(t)
	if _, err := h.ReadPartition(ctx, onB); !errors.Is(err, storage.ErrHomeUnavailable) {
		t.Fatalf("ReadPartition of b's partition: %v, want ErrHomeUnavailable", err)
	}
	if _, err := h.BeginPush(ctx, onB); !errors.Is(err, storage.ErrHomeUnavailable) {
		t.Fatalf("BeginPush of b's partition: %v, want ErrHomeUnavailable", err)
	}
	if info, err := h.TouchPartition(ctx, onMain, 2); err != nil || !info.Exists {
		t.Fatalf("main's partition: %+v, %v", info, err)
	}
	// A checkpoint change renews main's gate generation: main's gate reads
	// the other homes' pending checkpoints again, and takes b's last
	// reading while b cannot be reached.
	if _, err := h.DeclareCheckpoint(ctx, storage.CheckpointDeclaration{Partition: onMain, Name: "cp", SchemaVersion: 1}, 1); err != nil {
		t.Fatal(err)
	}
	if g, err := h.ReadServeGate(ctx, onMain, 1); err != nil || len(g.Pending) != 1 || g.Pending[0].Name != "cp" {
		t.Fatalf("main's gate with b down: %+v, %v", g, err)
	}
	if _, err := h.ClaimReactions(ctx, 1, 1000, 10); err != nil {
		t.Fatalf("ClaimReactions with b down: %v", err)
	}
	if _, err := h.ListPartitions(ctx); !errors.Is(err, storage.ErrHomeUnavailable) {
		t.Fatalf("ListPartitions with b down: %v, want ErrHomeUnavailable", err)
	}
	st := h.Stats()
	if st[1].Home != "b" || st[1].Unreachable == 0 || st[0].Unreachable != 0 {
		t.Fatalf("Stats = %+v", st)
	}
	dbs[1].acceptConnections(t)
	if info, err := h.ReadPartition(ctx, onB); err != nil || !info.Exists {
		t.Fatalf("b's partition once b is back: %+v, %v", info, err)
	}
}
