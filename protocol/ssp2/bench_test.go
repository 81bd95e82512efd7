package ssp2

import (
	"bytes"
	"fmt"
	"io"
	"testing"
)

var todoCols = []Column{
	{Name: "id", Type: TypeString},
	{Name: "title", Type: TypeString},
	{Name: "done", Type: TypeBoolean},
	{Name: "project_id", Type: TypeString},
	{Name: "updated_at", Type: TypeInteger},
	{Name: "notes", Type: TypeString, Nullable: true},
}

// benchResponse builds RESP_HEADER, SUB_START, 1000 COMMITs of 5 todo
// upserts (one scope key each) and SUB_END.
func benchResponse(tb testing.TB) (*Message, int) {
	codec := NewRowCodec(todoCols)
	m := &Message{WireVersion: WireV2, Kind: KindResponse}
	latest := int32(3)
	m.Frames = append(m.Frames,
		&RespHeader{LatestSchemaVersion: &latest, LogEpoch: "epoch-1"},
		&SubStart{ID: "sub-todos", Status: SubActive, EffectiveScopes: map[string][]string{"project": {"p1"}}})
	rowBytes := 0
	for c := 0; c < 1000; c++ {
		cm := &Commit{CommitSeq: int64(c + 1), CreatedAtMs: 1782993600000 + int64(c), ActorID: "actor-1", Tables: []string{"todos"}}
		for k := 0; k < 5; k++ {
			id := fmt.Sprintf("todo-%06d-%d", c, k)
			row, err := codec.Append(nil, Row{id, fmt.Sprintf("Buy groceries and cook dinner #%d", c*5+k), k%2 == 0, "p1", int64(1782993600000 + c), nil})
			if err != nil {
				tb.Fatal(err)
			}
			rowBytes += len(row)
			v := int64(k + 1)
			cm.Changes = append(cm.Changes, Change{TableIndex: 0, RowID: id, Op: OpUpsert, RowVersion: &v, Scopes: map[string]string{"project": "p1"}, Row: row})
		}
		m.Frames = append(m.Frames, cm)
	}
	m.Frames = append(m.Frames, &SubEnd{NextCursor: 1000})
	return m, rowBytes / 5000
}

func BenchmarkEncodeResponse1000Commits(b *testing.B) {
	m, avgRow := benchResponse(b)
	out, err := Encode(m)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(avgRow), "rowbytes")
	b.SetBytes(int64(len(out)))
	b.ReportAllocs()
	enc := NewEncoder(io.Discard, WireV2, KindResponse)
	b.ResetTimer()
	for b.Loop() {
		enc.Reset(io.Discard, WireV2, KindResponse)
		for _, f := range m.Frames {
			if err := enc.WriteFrame(f); err != nil {
				b.Fatal(err)
			}
		}
		if err := enc.Close(); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkEncodeResponse1000CommitsWhole(b *testing.B) {
	m, _ := benchResponse(b)
	out, err := Encode(m)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(out)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Encode(m); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeResponse1000Commits(b *testing.B) {
	m, _ := benchResponse(b)
	out, err := Encode(m)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(out)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeResponse(out); err != nil {
			b.Fatal(err)
		}
	}
}

// TestEncodeCommitNoPerChangeAllocs pins the no-allocation-per-change
// guarantee of COMMIT encoding through the streaming encoder.
func TestEncodeCommitNoPerChangeAllocs(t *testing.T) {
	m, _ := benchResponse(t)
	enc := NewEncoder(io.Discard, WireV2, KindResponse)
	run := func() {
		enc.Reset(io.Discard, WireV2, KindResponse)
		for _, f := range m.Frames {
			if err := enc.WriteFrame(f); err != nil {
				t.Fatal(err)
			}
		}
		if err := enc.Close(); err != nil {
			t.Fatal(err)
		}
	}
	run() // warm the buffer
	allocs := testing.AllocsPerRun(5, run)
	// 5000 changes: anything per change would show as >= 5000.
	if allocs > 10 {
		t.Fatalf("streaming encode of 5000 changes made %.0f allocations", allocs)
	}
	var buf bytes.Buffer
	enc2 := NewEncoder(&buf, WireV2, KindResponse)
	for _, f := range m.Frames {
		if err := enc2.WriteFrame(f); err != nil {
			t.Fatal(err)
		}
	}
	if err := enc2.Close(); err != nil {
		t.Fatal(err)
	}
	whole, err := Encode(m)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf.Bytes(), whole) {
		t.Fatal("streaming encoder output differs from Encode")
	}
}
