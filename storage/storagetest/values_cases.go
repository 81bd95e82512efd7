package storagetest

import (
	"encoding/json"
	"math"

	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage"
)

const maxSafe = int64(1)<<53 - 1

// valueRows covers every value type, extremes, NULLs and empty bytes.
func valueRows() []ssp2.Row {
	return []ssp2.Row{
		{"full", "p1", int64(1), "héllo wörld 😀 𝄞 \t\"quoted\"", maxSafe, 3.141592653589793, true,
			json.RawMessage(" { \"a\" : [1, 2 ,3],\n\t\"b\":\"x\" } "), []byte{0, 1, 2, 0xfe, 0xff},
			`{"id":"blob1","size":3}`, []byte{9, 8, 7}, "C1"},
		{"nulls", "p1", int64(2), nil, nil, nil, nil, nil, nil, nil, nil, nil},
		{"edges", "p1", int64(-7), "", -maxSafe, 2.0, false, json.RawMessage(`null`), []byte{}, "", []byte{}, nil},
		{"wide", "p1", int64(math.MaxInt64), "x", int64(math.MinInt64), -1e-300, true, json.RawMessage(`[]`), []byte{0}, nil, nil, nil},
		{"floats", "p1", int64(0), nil, int64(0), 1e300, nil, json.RawMessage(`"s"`), nil, nil, nil, nil},
	}
}

var valueTests = []test{
	{name: "RoundTrip", fn: func(e *env) {
		rows := valueRows()
		e.push("p", func(tx storage.PushTx) {
			for i, r := range rows {
				e.put(tx, e.items, int64(i+1), r)
			}
			for i, r := range valueRows() {
				e.wantRow("GetRow in tx", e.getRow(tx, e.items, r[0].(string)), storage.RowRecord{RowID: r[0].(string), Version: int64(i + 1), Values: r})
			}
		})
		// The store must not alias caller memory.
		rows[0][8].([]byte)[0] = 0x55
		rows[0][7].(json.RawMessage)[1] = 'X'
		byID := map[string]int{}
		for i, r := range valueRows() {
			byID[r[0].(string)] = i
			e.wantRow("GetRow after commit", e.committedRow("p", e.items, r[0].(string)), storage.RowRecord{RowID: r[0].(string), Version: int64(i + 1), Values: r})
		}
		got := e.scanRows("p", storage.RowQuery{Table: e.items, Scopes: map[string][]string{"project": {"p1"}}, Limit: 100})
		if len(got) != len(rows) {
			e.t.Fatalf("ScanRows returned %d rows, want %d", len(got), len(rows))
		}
		want := valueRows()
		for _, g := range got {
			i, ok := byID[g.RowID]
			if !ok {
				e.t.Fatalf("ScanRows returned unknown row %q", g.RowID)
			}
			e.wantRow("ScanRows", &g, storage.RowRecord{RowID: g.RowID, Version: int64(i + 1), Values: want[i]})
		}
	}},
	{name: "ChangeBytesRoundTrip", fn: func(e *env) {
		ch := storage.ChangeRecord{Table: "items", RowID: "r😀", Op: ssp2.OpUpsert, RowVersion: maxSafe,
			Scopes: sc("project", "pé 😀", "owner", "-5"), Row: []byte{0, 0xff, 1, 0}}
		e.commitChanges("p", ch)
		got := e.scanChanges("p", storage.ChangeQuery{Table: "items", Scopes: map[string][]string{"project": {"pé 😀"}, "owner": {"-5"}}, UpToSeq: 1, LimitChanges: 5})
		e.wantScan("exotic change", got, ptr(false), cc(1, ch))
	}},
}
