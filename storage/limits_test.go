package storage_test

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage"
)

func TestStorable(t *testing.T) {
	for s, want := range map[string]bool{
		"": true, "abc": true, "héllo 😀": true, "\x01\x7f": true,
		"a\x00b": false, "\x00": false, "a\xffb": false, "\xc3": false, "\xed\xa0\x80": false, // surrogate
	} {
		if got := storage.Storable(s); got != want {
			t.Errorf("Storable(%q) = %v, want %v", s, got, want)
		}
	}
}

func TestStorableValues(t *testing.T) {
	all := []string{"a", "b", "c"}
	if got := storage.StorableValues(all); &got[0] != &all[0] {
		t.Error("StorableValues copied a list with nothing to drop")
	}
	in := []string{"a", "b\x00", "c", "\xff", "d"}
	got := storage.StorableValues(in)
	if !slices.Equal(got, []string{"a", "c", "d"}) {
		t.Fatalf("StorableValues = %q", got)
	}
	if !slices.Equal(in, []string{"a", "b\x00", "c", "\xff", "d"}) {
		t.Fatalf("StorableValues modified its argument: %q", in)
	}
	if got := storage.StorableValues([]string{"\x00"}); len(got) != 0 {
		t.Fatalf("StorableValues of only unstorable values = %q", got)
	}
}

func TestQuoteID(t *testing.T) {
	if got := storage.QuoteID("a\x00"); got != `"a\x00"` {
		t.Errorf("QuoteID short = %s", got)
	}
	long := strings.Repeat("x", 100)
	if got, want := storage.QuoteID(long), `"`+strings.Repeat("x", 64)+`"...(100 bytes)`; got != want {
		t.Errorf("QuoteID long = %s, want %s", got, want)
	}
}

func TestCheckCommit(t *testing.T) {
	ok := storage.CommitRecord{Seq: 1, ActorID: "a", ClientID: "c", ClientCommitID: "k",
		Changes: []storage.ChangeRecord{{Table: "t", RowID: "r", Scopes: map[string]string{"x": "1", "y": "2"}}}}
	if err := storage.CheckCommit("p", ok); err != nil {
		t.Fatalf("CheckCommit(valid) = %v", err)
	}
	// Several bad scope vars: the error names the first in name order,
	// whatever the map iteration order.
	bad := ok
	bad.Changes = []storage.ChangeRecord{{Table: "t", RowID: "r", Scopes: map[string]string{"a": "\x00", "b": "\x00", "c": "\x00", "d": "ok"}}}
	for range 20 {
		err := storage.CheckCommit("p", bad)
		if !errors.Is(err, storage.ErrUnstorable) || !strings.Contains(err.Error(), `scope "a" value`) {
			t.Fatalf("CheckCommit(bad scopes) = %v, want ErrUnstorable naming var a", err)
		}
	}
	// The scope index key counts partition, table, var and value.
	key := ok
	val := strings.Repeat("v", storage.MaxIdentifierBytes)
	key.Changes = []storage.ChangeRecord{{Table: "t", RowID: "r", Scopes: map[string]string{"x": val}}}
	if err := storage.CheckCommit(strings.Repeat("p", storage.MaxIndexKeyBytes-len(val)-len("t")-len("x")-16), key); err != nil {
		t.Fatalf("CheckCommit(scope key at the limit) = %v", err)
	}
	if err := storage.CheckCommit(strings.Repeat("p", storage.MaxIndexKeyBytes-len(val)-len("t")-len("x")-15), key); !errors.Is(err, storage.ErrUnstorable) {
		t.Fatalf("CheckCommit(scope key over the limit) = %v", err)
	}
}

func TestCheckRow(t *testing.T) {
	sch, err := schema.Parse([]byte(`{"version": 1, "tables": [{"name": "t",
		"columns": [{"name": "id", "type": "string"}, {"name": "g", "type": "string"}, {"name": "n", "type": "integer", "nullable": true},
			{"name": "j", "type": "json", "nullable": true}, {"name": "b", "type": "bytes", "nullable": true}],
		"primaryKey": "id", "scopes": ["g:{g}"], "indexes": [{"name": "nb", "columns": ["n", "b"], "unique": true}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	tb := sch.Table("t")
	row := func(id, g string, n, j, b any) storage.RowRecord {
		return storage.RowRecord{RowID: id, Version: 1, Values: ssp2.Row{id, g, n, j, b}}
	}
	if err := storage.CheckRow("p", tb, row("r", "g", int64(1), json.RawMessage(`{"a":"\u0000"}`), []byte{0, 0xff})); err != nil {
		t.Fatalf("CheckRow(valid; NUL bytes in a bytes column and an escaped NUL in JSON are fine) = %v", err)
	}
	// Index (partition, n, b): 1 + 8 + len(b).
	if err := storage.CheckRow("p", tb, row("r", "g", int64(1), nil, make([]byte, storage.MaxIndexKeyBytes-9))); err != nil {
		t.Fatalf("CheckRow(index key at the limit) = %v", err)
	}
	for name, r := range map[string]storage.RowRecord{
		"raw NUL in json":     row("r", "g", nil, json.RawMessage("\"\x00\""), nil),
		"index key over":      row("r", "g", int64(1), nil, make([]byte, storage.MaxIndexKeyBytes-8)),
		"scope value over":    row("r", strings.Repeat("g", storage.MaxIdentifierBytes+1), nil, nil, nil),
		"scope key over":      row(strings.Repeat("r", storage.MaxIdentifierBytes), strings.Repeat("g", storage.MaxIdentifierBytes), nil, nil, nil),
		"invalid UTF-8 value": row("r", "g\xff", nil, nil, nil),
	} {
		err := storage.CheckRow("p", tb, r)
		if !errors.Is(err, storage.ErrUnstorable) || !errors.Is(err, storage.ErrConstraint) {
			t.Errorf("CheckRow(%s) = %v, want ErrUnstorable and ErrConstraint", name, err)
		}
	}
	// A short row (arity is the backend's to report) does not panic.
	if err := storage.CheckRow("p", tb, storage.RowRecord{RowID: "r", Values: ssp2.Row{"r"}}); err != nil {
		t.Fatalf("CheckRow(short row) = %v", err)
	}
}

// A reference column's index key is (partition, value, row ID), like a
// scope column's; a reference of the primary key itself adds none.
func TestCheckRowReferenceKey(t *testing.T) {
	sch, err := schema.Parse([]byte(`{"version": 1, "tables": [{"name": "t",
		"columns": [{"name": "id", "type": "string"}, {"name": "g", "type": "string"}, {"name": "up", "type": "string", "nullable": true}],
		"primaryKey": "id", "scopes": ["g:{g}"], "references": [{"column": "up", "parentTable": "t"}, {"column": "id", "parentTable": "t"}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	tb := sch.Table("t")
	row := func(up any) storage.RowRecord {
		return storage.RowRecord{RowID: "r", Version: 1, Values: ssp2.Row{"r", "g", up}}
	}
	// Key (partition "p", up, row id "r"): 1 + len(up) + 1.
	for _, c := range []struct {
		up any
		ok bool
	}{{nil, true}, {strings.Repeat("u", storage.MaxIndexKeyBytes-2), true}, {strings.Repeat("u", storage.MaxIndexKeyBytes-1), false}} {
		err := storage.CheckRow("p", tb, row(c.up))
		if c.ok && err != nil {
			t.Errorf("CheckRow(reference value of %d bytes) = %v, want nil", keyLen(c.up), err)
		}
		if !c.ok && (!errors.Is(err, storage.ErrUnstorable) || !errors.Is(err, storage.ErrConstraint) || !strings.Contains(err.Error(), "reference column up")) {
			t.Errorf("CheckRow(reference value of %d bytes) = %v, want ErrUnstorable and ErrConstraint naming reference column up", keyLen(c.up), err)
		}
	}
}

func keyLen(v any) int {
	s, _ := v.(string)
	return len(s)
}

func TestStorableClients(t *testing.T) {
	good := []storage.ClientRecord{{ClientID: "a"}, {ClientID: "b", ActorID: "x", Subscriptions: json.RawMessage(`[]`)}}
	keep, err := storage.StorableClients("p", good)
	if err != nil || len(keep) != 2 || &keep[0] != &good[0] {
		t.Fatalf("StorableClients(all storable) = %v, %v", keep, err)
	}
	recs := []storage.ClientRecord{{ClientID: "\x00x"}, {ClientID: "a"}, {ClientID: "y", ActorID: "\xff"}, {ClientID: "b"}}
	keep, err = storage.StorableClients("p", recs)
	var kept []string
	for _, r := range keep {
		kept = append(kept, r.ClientID)
	}
	if !slices.Equal(kept, []string{"a", "b"}) {
		t.Fatalf("kept %q, want a, b", kept)
	}
	if !errors.Is(err, storage.ErrUnstorable) || !strings.Contains(err.Error(), `"\x00x", "y"`) {
		t.Fatalf("StorableClients error = %v, want ErrUnstorable naming \"\\x00x\", \"y\"", err)
	}
	keep, err = storage.StorableClients("p\x00", good)
	if len(keep) != 0 || !errors.Is(err, storage.ErrUnstorable) {
		t.Fatalf("StorableClients(unstorable partition) = %v, %v", keep, err)
	}
}
