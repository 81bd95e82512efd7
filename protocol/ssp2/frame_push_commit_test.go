package ssp2

import "testing"

func TestFramePushCommit(t *testing.T) {
	base := int64(3)
	checkFrame(t, "PUSH_COMMIT",
		frameCase{name: "upsert and delete", at: 1, frames: []Frame{exReqHeader, &PushCommit{ClientCommitID: "cc-1", Operations: []Operation{
			{Table: "todos", RowID: "t1", Op: OpUpsert, BaseVersion: &base, Payload: []byte{0xAA}},
			{Table: "todos", RowID: "t2", Op: OpDelete},
		}}},
			payload: cat(s("cc-1"), u32(2),
				s("todos"), s("t1"), []byte{1, 1}, i64(3), []byte{1}, appendBytes(nil, []byte{0xAA}),
				s("todos"), s("t2"), []byte{2, 0, 0}),
			json: `{"type":"PUSH_COMMIT","clientCommitId":"cc-1","operations":[{"table":"todos","rowId":"t1","op":"upsert","baseVersion":3,"payload":"qg=="},{"table":"todos","rowId":"t2","op":"delete"}]}`},
	)
	del := []Operation{{Table: "todos", RowID: "t2", Op: OpDelete}}
	checkRefusals(t,
		frameRefusal{name: "no operations", kind: KindRequest, frames: []Frame{exReqHeader, &PushCommit{ClientCommitID: "cc-1"}}, want: "PUSH_COMMIT with zero operations"},
		frameRefusal{name: "empty id", kind: KindRequest, frames: []Frame{exReqHeader, &PushCommit{Operations: del}}, want: "PUSH_COMMIT.clientCommitId must be non-empty"},
		frameRefusal{name: "delete with payload", kind: KindRequest, frames: []Frame{exReqHeader, &PushCommit{ClientCommitID: "cc-1", Operations: []Operation{{Table: "todos", RowID: "t2", Op: OpDelete, Payload: []byte{}}}}},
			want: "op payload must be present iff the op is an upsert"},
		frameRefusal{name: "after the pull", kind: KindRequest, frames: []Frame{exReqHeader, exPull, &PushCommit{ClientCommitID: "cc-1", Operations: del}}, want: "PUSH_COMMIT out of grammar order"},
	)
}
