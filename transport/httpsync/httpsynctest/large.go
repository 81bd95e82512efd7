package httpsynctest

import (
	"fmt"
	"strings"

	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
)

// LargePush shapes a push the way the official client cuts its outbox: by
// operation count (at most 500 a request), never by bytes.
type LargePush struct {
	// Commits and OpsPerCommit: e.g. 1×100 (one commit of 100
	// operations) or 500×1 (500 one-operation commits).
	Commits, OpsPerCommit int
	// TitleBytes is the size of each row's title (the demo todos table).
	TitleBytes int
}

// Bytes is about the encoded size of the push's operations.
func (p LargePush) Bytes() int { return p.Commits * p.OpsPerCommit * p.TitleBytes }

func (p LargePush) String() string {
	return fmt.Sprintf("%d commits × %d ops × %d KB", p.Commits, p.OpsPerCommit, p.TitleBytes/1000)
}

var todoCodec = ssp2.NewRowCodec(schema.MustDemo().Table("todos").Columns)

// Build returns the push's commits: upserts of demo todos in list, ids and
// clientCommitIds prefixed by tag (distinct tags give distinct commits).
func (p LargePush) Build(tag, list string) []*ssp2.PushCommit {
	title := strings.Repeat("x", p.TitleBytes)
	out := make([]*ssp2.PushCommit, p.Commits)
	for c := range out {
		ops := make([]ssp2.Operation, p.OpsPerCommit)
		for o := range ops {
			id := fmt.Sprintf("%s-%d-%d", tag, c, o)
			payload, err := todoCodec.AppendSparse(nil, ssp2.Row{id, list, title, false, int64(o), int64(1)}, nil, 0)
			if err != nil {
				panic(err) // the demo row is always encodable
			}
			ops[o] = ssp2.Operation{Table: "todos", RowID: id, Op: ssp2.OpUpsert, Payload: payload}
		}
		out[c] = &ssp2.PushCommit{ClientCommitID: fmt.Sprintf("%s-commit-%d", tag, c), Operations: ops}
	}
	return out
}
