package yjs

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
)

type vector struct {
	Name    string          `json:"name"`
	Updates []string        `json:"updates"`
	State   json.RawMessage `json:"state"`
}

// loadVectors reads testdata/vectors.json (written by testdata/node/gen.mjs
// with the yjs package).
func loadVectors(t testing.TB) []vector {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "vectors.json"))
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Vectors []vector `json:"vectors"`
	}
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	if len(f.Vectors) == 0 {
		t.Fatal("no vectors")
	}
	return f.Vectors
}

func (v vector) updates(t testing.TB) [][]byte {
	t.Helper()
	out := make([][]byte, len(v.Updates))
	for i, s := range v.Updates {
		b, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			t.Fatal(err)
		}
		out[i] = b
	}
	return out
}

// foldRandom merges us in a random order and grouping: a random pair of
// the remaining values is merged until one is left, as a server merging
// pushes that arrive in any order (and clients re-merging merged states)
// would.
func foldRandom(t testing.TB, rng *rand.Rand, us [][]byte) []byte {
	t.Helper()
	pool := append([][]byte(nil), us...)
	for len(pool) > 1 {
		i := rng.IntN(len(pool))
		j := rng.IntN(len(pool) - 1)
		if j >= i {
			j++
		}
		m, err := Merger{}.Merge(pool[i], pool[j])
		if err != nil {
			t.Fatalf("merge: %v", err)
		}
		pool[i] = m
		pool = append(pool[:j], pool[j+1:]...)
	}
	m, err := Merger{}.Merge(nil, pool[0])
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestMergeOrderIndependent merges every vector's updates in 1,000 random
// interleavings in all (random order, random grouping, the stored side
// sometimes the earlier merge and sometimes the new update) and requires
// the byte-identical result every time.
func TestMergeOrderIndependent(t *testing.T) {
	vs := loadVectors(t)
	rng := rand.New(rand.NewPCG(18, 2))
	for k := range 1000 {
		v := vs[k%len(vs)]
		us := v.updates(t)
		want, err := MergeUpdates(us...)
		if err != nil {
			t.Fatalf("%s: %v", v.Name, err)
		}
		if got := foldRandom(t, rng, us); !bytes.Equal(got, want) {
			t.Fatalf("%s: interleaving %d merged to different bytes", v.Name, k)
		}
	}
}

// TestMergeIdempotent: re-merging any update already contained, or the
// merge itself, changes nothing.
func TestMergeIdempotent(t *testing.T) {
	for _, v := range loadVectors(t) {
		us := v.updates(t)
		all, err := MergeUpdates(us...)
		if err != nil {
			t.Fatalf("%s: %v", v.Name, err)
		}
		for i, u := range append(us, all) {
			again, err := Merger{}.Merge(all, u)
			if err != nil {
				t.Fatalf("%s: %v", v.Name, err)
			}
			if !bytes.Equal(again, all) {
				t.Fatalf("%s: re-merging input %d changed the merge", v.Name, i)
			}
		}
	}
}

// TestMergeEmpty: empty and nil values are the empty document.
func TestMergeEmpty(t *testing.T) {
	empty := []byte{0, 0}
	for _, c := range []struct {
		name             string
		stored, incoming []byte
	}{{"nil nil", nil, nil}, {"nil empty", nil, []byte{}}, {"empty update", nil, empty}, {"both empty updates", empty, empty}} {
		got, err := Merger{}.Merge(c.stored, c.incoming)
		if err != nil || !bytes.Equal(got, empty) {
			t.Fatalf("%s: Merge = %x, %v; want %x", c.name, got, err, empty)
		}
	}
}
