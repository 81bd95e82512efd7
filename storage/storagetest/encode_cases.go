package storagetest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"

	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage"
)

// encodeRowsTests check storage.RowEncoder: EncodeRows builds byte for
// byte the segment that VisitRows plus AddRow build, with the same count,
// last row id and "more" answer, for every column type. They run on the
// backend's optional RowEncoder fast path (group EncodeRows) and on
// storage.VisitEncoder over its Rows role (group VisitEncoder), which is
// what the engine encodes with when the fast path is nil.
var encodeRowsTests = []test{
	{name: "SameSegmentAsVisitRows", fn: func(e *env) {
		enc := e.encoder()
		e.allTypesFixture()
		cases := append(e.rowQueryCases(),
			rowQueryCase{"limit equals the rows", "p", storage.RowQuery{Table: e.items, Scopes: p1, AfterRowID: ptr("t-all"), Limit: 2}})
		for _, c := range cases {
			want, wantSeg := e.visitEncoded(c.part, c.q)
			sb := ssp2.NewSegmentBuilder(c.q.Table.Name, 1, c.q.Table.Columns)
			got, err := enc.EncodeRows(e.ctx, c.part, c.q, sb)
			if err != nil {
				e.t.Fatalf("%s: EncodeRows: %v", c.name, err)
			}
			if got != want {
				e.t.Fatalf("%s: EncodeRows = %+v, VisitRows gives %+v", c.name, got, want)
			}
			if seg := sb.Finish(); !bytes.Equal(seg, wantSeg) {
				e.t.Fatalf("%s: EncodeRows segment differs from VisitRows + AddRow:\n%x\n%x", c.name, seg, wantSeg)
			}
		}
		if _, s := e.visitEncoded("p", storage.RowQuery{Table: e.items, Scopes: p1, Limit: 100}); !bytes.Contains(s, []byte("title ü")) {
			e.t.Fatal("the fixture's full row is not in the reference segment")
		}
		sb := ssp2.NewSegmentBuilder("items", 1, e.items.Columns)
		if _, err := enc.EncodeRows(e.ctx, "p", storage.RowQuery{Table: e.items, Scopes: p1}, sb); err == nil {
			e.t.Fatal("EncodeRows without a limit succeeded; a page is always bounded")
		}
	}},
	{name: "CanceledContext", fn: func(e *env) {
		enc := e.encoder()
		e.rowFixture()
		ctx, cancel := context.WithCancel(e.ctx)
		cancel()
		sb := ssp2.NewSegmentBuilder("items", 1, e.items.Columns)
		if _, err := enc.EncodeRows(ctx, "p", storage.RowQuery{Table: e.items, Scopes: p1, Limit: 100}, sb); !errors.Is(err, context.Canceled) {
			e.t.Fatalf("EncodeRows with a canceled context = %v, want context.Canceled", err)
		}
		// The store keeps serving afterwards.
		sb = ssp2.NewSegmentBuilder("items", 1, e.items.Columns)
		got, err := enc.EncodeRows(e.ctx, "p", storage.RowQuery{Table: e.items, Scopes: p1, Limit: 100}, sb)
		if err != nil || got.Rows != len(rowIDs) {
			e.t.Fatalf("EncodeRows after a canceled one = %+v, %v; want %d rows", got, err, len(rowIDs))
		}
	}},
}

// allTypesFixture is rowFixture plus rows of p1 in partition p that set
// every column type, with empty values and the extreme safe integers (two
// of them with column versions).
func (e *env) allTypesFixture() {
	e.rowFixture()
	ref := `{"blobId":"sha256:` + "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff" + `","byteLength":3,"mediaType":"text/plain"}`
	e.push("p", func(tx storage.PushTx) {
		// Stored with column versions, which no encoded or copied row
		// may hold.
		e.putCV(tx, e.items, 3, ssp2.Row{"t-all", "p1", int64(3), "title ü", int64(-5), 2.5, true,
			json.RawMessage(`{"a":[1,"x"]}`), []byte{0, 1, 255}, ref, []byte{1, 2}, "code-1"}, storage.EncodeColumnVersions([]int64{1, 2, 3, 3}, 3))
		e.putCV(tx, e.items, 4, ssp2.Row{"t-empty", "p1", int64(0), "", int64(0), 0.0, false,
			json.RawMessage(`[]`), []byte{}, nil, []byte{}, nil}, storage.InsertedColumnVersions())
		e.put(tx, e.items, int64(ssp2.MaxSafeInt), ssp2.Row{"t-big", "p1", int64(ssp2.MaxSafeInt), nil, int64(-ssp2.MaxSafeInt), -1e300, nil,
			nil, nil, nil, nil, nil})
	})
}

// allTypesRows is how many rows of p1 partition p holds after allTypesFixture.
var allTypesRows = len(rowIDs) + 3

// encoder returns the RowEncoder the EncodeRows cases check: the
// backend's RowEncoder fast path, or storage.VisitEncoder on its Rows role
// for the VisitEncoder group (env.visitEncoder).
func (e *env) encoder() storage.RowEncoder {
	if e.visitEncoder {
		return storage.VisitEncoder{Rows: e.b.Rows}
	}
	return e.b.RowEncoder
}

// visitEncoded is EncodeRows' reference: VisitRows plus AddRow.
func (e *env) visitEncoded(part string, q storage.RowQuery) (storage.EncodedRows, []byte) {
	e.t.Helper()
	var out storage.EncodedRows
	sb := ssp2.NewSegmentBuilder(q.Table.Name, 1, q.Table.Columns)
	limit := q.Limit
	q.Limit = limit + 1
	err := e.visitor().VisitRows(e.ctx, part, q, func(rec storage.RowRecord) error {
		if out.Rows == limit {
			out.More = true
			return nil
		}
		out.Rows++
		out.LastRowID = rec.RowID
		return sb.AddRow(rec.Version, rec.Values)
	})
	if err != nil {
		e.t.Fatalf("VisitRows: %v", err)
	}
	return out, sb.Finish()
}
