package ssp2

import "testing"

func TestFrameCommit(t *testing.T) {
	version := int64(2)
	checkFrame(t, "COMMIT",
		frameCase{name: "upsert and delete", at: 2, frames: []Frame{exRespHeader, exSubStart, &Commit{CommitSeq: 12, CreatedAtMs: 1700000000000, ActorID: "actor-1",
			Tables: []string{"todos", "notes"}, Changes: []Change{
				{TableIndex: 1, RowID: "n1", Op: OpUpsert, RowVersion: &version, Scopes: map[string]string{"project": "p1"}, Row: []byte{5}},
				{TableIndex: 0, RowID: "t1", Op: OpDelete, Scopes: map[string]string{}},
			}}, exSubEnd},
			payload: cat(i64(12), i64(1700000000000), s("actor-1"), u32(2), s("todos"), s("notes"), u32(2),
				u16(1), s("n1"), []byte{1, 1}, i64(2), u32(1), s("project"), s("p1"), []byte{1}, appendBytes(nil, []byte{5}),
				u16(0), s("t1"), []byte{2, 0}, u32(0), []byte{0}),
			json: `{"type":"COMMIT","commitSeq":12,"createdAtMs":1700000000000,"actorId":"actor-1","tables":["todos","notes"],"changes":[` +
				`{"tableIndex":1,"rowId":"n1","op":"upsert","rowVersion":2,"scopes":{"project":"p1"},"row":"BQ=="},` +
				`{"tableIndex":0,"rowId":"t1","op":"delete","scopes":{}}]}`},
	)
	del := []Change{{TableIndex: 0, RowID: "t1", Op: OpDelete}}
	checkRefusals(t,
		frameRefusal{name: "tableIndex out of range", kind: KindResponse, frames: []Frame{exRespHeader, exSubStart,
			&Commit{Tables: []string{"todos"}, Changes: []Change{{TableIndex: 1, RowID: "t1", Op: OpDelete}}}, exSubEnd}, want: "tableIndex 1 out of range (1 tables)"},
		frameRefusal{name: "upsert without row", kind: KindResponse, frames: []Frame{exRespHeader, exSubStart,
			&Commit{Tables: []string{"todos"}, Changes: []Change{{RowID: "t1", Op: OpUpsert, RowVersion: &version}}}, exSubEnd},
			want: "change rowVersion and row must be present iff the op is an upsert"},
		frameRefusal{name: "outside a section", kind: KindResponse, frames: []Frame{exRespHeader, &Commit{Tables: []string{"todos"}, Changes: del}}, want: "COMMIT outside a subscription section"},
		frameRefusal{name: "after a segment", kind: KindResponse, frames: []Frame{exRespHeader, exSubStart,
			&SegmentRef{SegmentID: "s", MediaType: MediaRows}, &Commit{Tables: []string{"todos"}, Changes: del}, exSubEnd},
			want: "COMMIT and segment frames mixed in one section"},
	)
}
