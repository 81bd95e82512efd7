package engine_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/partition"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage/memory"
	"github.com/synclane/synclane/storage/postgres"
	"github.com/synclane/synclane/storage/postgres/pgtest"
	"github.com/synclane/synclane/storage/sqlite"
)

// details returns the PUSH_RESULT_DETAILS following the result of ccid.
func details(rep *engine.Reply, ccid string) *ssp2.PushResultDetails {
	for i, f := range rep.Frames {
		if pr, ok := f.(*ssp2.PushResult); ok && pr.ClientCommitID == ccid && i+1 < len(rep.Frames) {
			d, _ := rep.Frames[i+1].(*ssp2.PushResultDetails)
			return d
		}
	}
	return nil
}

func pushOne(t *testing.T, c *client, ccid string, ops ...ssp2.Operation) (*ssp2.PushResult, *ssp2.PushResultDetails) {
	t.Helper()
	rep, err := c.sync(&ssp2.PushCommit{ClientCommitID: ccid, Operations: ops})
	if err != nil {
		t.Fatalf("push %s: %v", ccid, err)
	}
	rs := results(rep)
	if len(rs) != 1 {
		t.Fatalf("push %s: %d results", ccid, len(rs))
	}
	return rs[0], details(rep, ccid)
}

// A row validator's verdict becomes the op's result on the wire (the test
// client round-trips every reply through the codec), and the cached
// replay answers the same without running the validator again.
func TestRowValidatorVerdicts(t *testing.T) {
	tests := []struct {
		name        string
		verdict     func() error
		wantStatus  ssp2.CommitStatus
		wantCode    string
		wantMessage string
		wantDetails string
	}{
		{name: "Accept", verdict: func() error { return nil }, wantStatus: ssp2.CommitApplied},
		{name: "HostCodeWithDetails", verdict: func() error {
			return &engine.Rejection{Code: "app.title_taken", Message: "that title is taken",
				Details: &engine.RejectionDetails{FieldPaths: []string{"title"}, Reason: "duplicate-title", References: map[string]string{"task": "t0"}}}
		}, wantStatus: ssp2.CommitRejected, wantCode: "app.title_taken", wantMessage: "that title is taken",
			wantDetails: `{"fieldPaths":["title"],"reason":"duplicate-title","references":{"task":"t0"}}`},
		{name: "HostCodeWithoutDetails", verdict: func() error {
			return fmt.Errorf("wrapped: %w", &engine.Rejection{Code: "APP_RULE"})
		}, wantStatus: ssp2.CommitRejected, wantCode: "APP_RULE", wantMessage: "operation 0 was rejected by the server's row validator"},
		// A failure (not a rejection) answers SPEC §6.7's fixed message,
		// never its own text.
		{name: "PlainError", verdict: func() error { return errors.New("database of the host is down") },
			wantStatus: ssp2.CommitRejected, wantCode: "sync.constraint_violation", wantMessage: "write validator failed"},
		{name: "Panic", verdict: func() error { panic("host bug") },
			wantStatus: ssp2.CommitRejected, wantCode: "sync.constraint_violation", wantMessage: "write validator failed"},
		{name: "ReservedPrefix", verdict: func() error { return &engine.Rejection{Code: "sync.forbidden", Message: "no"} },
			wantStatus: ssp2.CommitRejected, wantCode: "sync.constraint_violation", wantMessage: "write validator failed"},
		{name: "ReservedClientPrefix", verdict: func() error { return &engine.Rejection{Code: "client.x"} },
			wantStatus: ssp2.CommitRejected, wantCode: "sync.constraint_violation"},
		{name: "CodeWithSpace", verdict: func() error { return &engine.Rejection{Code: "bad code"} },
			wantStatus: ssp2.CommitRejected, wantCode: "sync.constraint_violation"},
		{name: "InvalidDetails", verdict: func() error {
			return &engine.Rejection{Code: "app.x", Details: &engine.RejectionDetails{Reason: "Not A Token"}}
		}, wantStatus: ssp2.CommitRejected, wantCode: "sync.constraint_violation"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var calls atomic.Int32
			f := newFixture(t, memory.New(), func(c *engine.Config) {
				c.Validators = map[string]engine.RowValidator{"tasks": func(ctx context.Context, w *engine.RowWrite) error {
					calls.Add(1)
					return tc.verdict()
				}}
			})
			a := f.client("alice", "ca")
			for round, wantCalls := range []int32{1, 1} {
				pr, d := pushOne(t, a, "c1", upsert("tasks", "t1", f.row("t1", "P", "x"), nil))
				want := tc.wantStatus
				if round == 1 && want == ssp2.CommitApplied {
					want = ssp2.CommitCached
				}
				if pr.Status != want {
					t.Fatalf("round %d: status %v, want %v (%+v)", round, pr.Status, want, pr.Results)
				}
				if got := calls.Load(); got != wantCalls {
					t.Fatalf("round %d: validator ran %d times, want %d", round, got, wantCalls)
				}
				if want != ssp2.CommitRejected {
					continue
				}
				r := pr.Results[0]
				if r.Code != tc.wantCode || r.OpIndex != 0 || r.Status != ssp2.OpError || r.Retryable {
					t.Fatalf("round %d: result %+v, want code %s", round, r, tc.wantCode)
				}
				if tc.wantMessage != "" && r.Message != tc.wantMessage {
					t.Fatalf("round %d: message %q, want %q", round, r.Message, tc.wantMessage)
				}
				switch {
				case tc.wantDetails == "" && d != nil:
					t.Fatalf("round %d: unexpected details %+v", round, d)
				case tc.wantDetails != "" && (d == nil || len(d.Entries) != 1 || d.Entries[0].DetailsJSON != tc.wantDetails || d.Entries[0].OpIndex != 0):
					t.Fatalf("round %d: details %+v, want %s", round, d, tc.wantDetails)
				}
			}
			if rec, err := f.store.Log.LookupIdempotency(context.Background(), "p1", "ca", "c1"); err != nil || rec == nil {
				t.Fatalf("idempotency record: %v %v", rec, err)
			}
		})
	}
}

// The row validator sees the merged full row (the columns a patch
// presented laid over the stored row), which columns were presented, and
// the stored row; deletes see the stored row and no candidate.
func TestRowValidatorSeesMergedRowAndStored(t *testing.T) {
	var seen []engine.RowWrite
	f := newFixture(t, memory.New(), func(c *engine.Config) {
		c.Validators = map[string]engine.RowValidator{"tasks": func(ctx context.Context, w *engine.RowWrite) error {
			cp := *w
			seen = append(seen, cp)
			return nil
		}}
	})
	a := f.client("alice", "ca")
	a.push("c1", upsert("tasks", "t1", f.row("t1", "P", "one"), nil))
	a.push("c2", upsert("tasks", "t1", f.patch(ssp2.Row{"t1", nil, "two", nil}, 2), ver(1)))
	a.push("c3", del("t1"))
	if len(seen) != 3 {
		t.Fatalf("validator ran %d times, want 3", len(seen))
	}
	if w := seen[0]; w.Stored != nil || w.Row[2] != "one" || w.ActorID != "alice" || w.ClientID != "ca" || w.ClientCommitID != "c1" || w.Partition != "p1" {
		t.Fatalf("insert seen as %+v", w)
	}
	if w := seen[1]; w.Stored == nil || w.Stored.Version != 1 || w.Row[1] != "P" || w.Row[2] != "two" ||
		!w.Present.Has(0) || !w.Present.Has(2) || w.Present.Has(1) || w.Present.Has(3) {
		t.Fatalf("update seen as row %v present %08b stored %+v, want the stored scope P kept, columns 0 and 2 present", w.Row, w.Present, w.Stored)
	}
	if w := seen[0]; !w.Present.Full(4) {
		t.Fatalf("insert seen with present %08b, want every column", w.Present)
	}
	if w := seen[2]; w.Op != ssp2.OpDelete || w.Row != nil || w.Stored == nil || w.Stored.Values[2] != "two" {
		t.Fatalf("delete seen as %+v", w)
	}
}

// hookStores are the backends the commit-validator test runs on.
func hookStores(t *testing.T) map[string]func(t *testing.T) backend {
	return map[string]func(t *testing.T) backend{
		"memory": func(t *testing.T) backend { return memory.New() },
		"sqlite": func(t *testing.T) backend {
			st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "s.db"), sqlite.Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close() })
			return st
		},
		"postgres": func(t *testing.T) backend {
			return pgtest.OpenSchema(t, pgtest.NewSchema(t), postgres.Options{MaxConns: 4})
		},
	}
}

// The whole-commit validator reads the candidate state inside the push
// transaction (the commit's own writes included): a project may hold at
// most two tasks. Its rejection rolls back only its own commit, in a
// request whose other commits apply (one storage transaction, savepoints).
func TestCommitValidatorReadsCandidateState(t *testing.T) {
	for name, open := range hookStores(t) {
		t.Run(name, func(t *testing.T) {
			var scanErrs []error
			f := newFixture(t, open(t), func(c *engine.Config) {
				c.CommitValidator = func(ctx context.Context, v *engine.CommitView) error {
					// The scan without scopes and an out-of-range limit are refused.
					_, err1 := v.ScanRows(ctx, engine.ScanQuery{Table: "tasks"})
					_, err2 := v.ScanRows(ctx, engine.ScanQuery{Table: "tasks", Scopes: map[string][]string{"project_id": {"P"}}, Limit: 1001})
					_, err3 := v.ScanRows(ctx, engine.ScanQuery{Table: "tasks", Scopes: map[string][]string{"undeclared": {"P"}}})
					_, err4 := v.ScanRows(ctx, engine.ScanQuery{Table: "nope", Scopes: map[string][]string{"project_id": {"P"}}})
					scanErrs = append(scanErrs, err1, err2, err3, err4)
					for _, op := range v.Ops {
						if op.Op != ssp2.OpUpsert {
							continue
						}
						got, err := v.GetRow(ctx, "tasks", op.RowID)
						if err != nil || got == nil || got.Values[2] != op.Row[2] {
							return fmt.Errorf("GetRow(%s) = %+v, %v: the staged row is not visible", op.RowID, got, err)
						}
						rows, err := v.ScanRows(ctx, engine.ScanQuery{Table: "tasks", Scopes: map[string][]string{"project_id": {op.Row[1].(string)}}, Limit: 3})
						if err != nil {
							return err
						}
						if len(rows) > 2 {
							return &engine.Rejection{Code: "app.project_full", Message: "a project holds at most two tasks",
								OpIndex: op.OpIndex, Details: &engine.RejectionDetails{Reason: "project-full", References: map[string]string{"project": op.Row[1].(string)}}}
						}
					}
					return nil
				}
			})
			a := f.client("alice", "ca")
			rep, err := a.sync(
				&ssp2.PushCommit{ClientCommitID: "c1", Operations: []ssp2.Operation{upsert("tasks", "t1", f.row("t1", "P", "one"), nil)}},
				&ssp2.PushCommit{ClientCommitID: "c2", Operations: []ssp2.Operation{
					upsert("tasks", "q1", f.row("q1", "Q", "q"), nil),
					upsert("tasks", "t2", f.row("t2", "P", "two"), nil),
					upsert("tasks", "t3", f.row("t3", "P", "three"), nil)}},
				&ssp2.PushCommit{ClientCommitID: "c3", Operations: []ssp2.Operation{upsert("tasks", "t4", f.row("t4", "P", "four"), nil)}})
			if err != nil {
				t.Fatal(err)
			}
			rs := results(rep)
			if rs[0].Status != ssp2.CommitApplied || rs[2].Status != ssp2.CommitApplied {
				t.Fatalf("neighbours: %+v / %+v", rs[0], rs[2])
			}
			if rs[1].Status != ssp2.CommitRejected || rs[1].Results[0].Code != "app.project_full" || rs[1].Results[0].OpIndex != 1 {
				t.Fatalf("c2 = %+v, want app.project_full at op 1 (the whole commit is staged: t2 already sees t3)", rs[1].Results)
			}
			if d := details(rep, "c2"); d == nil || d.Entries[0].OpIndex != 1 || d.Entries[0].DetailsJSON != `{"reason":"project-full","references":{"project":"P"}}` {
				t.Fatalf("c2 details = %+v", d)
			}
			// c2 rolled back entirely (q1 too); c3 saw only t1 and applied.
			for id, want := range map[string]bool{"t1": true, "q1": false, "t2": false, "t3": false, "t4": true} {
				tx, err := f.store.Log.BeginPush(context.Background(), "p1")
				if err != nil {
					t.Fatal(err)
				}
				got, err := tx.GetRow(context.Background(), f.schema.Table("tasks"), id)
				tx.Rollback(context.Background())
				if err != nil || (got != nil) != want {
					t.Fatalf("row %s present = %v (%v), want %v", id, got != nil, err, want)
				}
			}
			for i, e := range scanErrs {
				if e == nil {
					t.Fatalf("scan check %d: refused query was answered", i)
				}
			}
			if !errors.Is(scanErrs[0], partition.ErrScanNeedsScopes) {
				t.Fatalf("scan without scopes: %v", scanErrs[0])
			}
			// The replay answers the stored rejection with its details.
			pr, d := pushOne(t, a, "c2", upsert("tasks", "q1", f.row("q1", "Q", "q"), nil))
			if pr.Status != ssp2.CommitRejected || pr.Results[0].Code != "app.project_full" || d == nil {
				t.Fatalf("replay of c2 = %+v details %+v", pr, d)
			}
		})
	}
}

// A validator naming a table not in the schema fails New.
func TestValidatorForUnknownTableFailsNew(t *testing.T) {
	f := newFixture(t, memory.New())
	_, err := engine.New(context.Background(), engine.Config{Schema: f.schema, Backend: memory.New().Backend(), Resolver: engine.AllowAll(f.schema),
		Validators: map[string]engine.RowValidator{"nope": func(context.Context, *engine.RowWrite) error { return nil }}})
	if err == nil {
		t.Fatal("New accepted a validator for an unknown table")
	}
}

// A whole-commit validator that fails instead of rejecting (an error that
// is not a Rejection, a panic) refuses the commit with
// sync.constraint_violation and SPEC §6.7's fixed message; its own text
// never reaches the client or the stored outcome.
func TestCommitValidatorFailureMessageIsFixed(t *testing.T) {
	const secret = "s3cret host detail"
	for name, fail := range map[string]func() error{
		"error": func() error { return errors.New(secret) },
		"panic": func() error { panic(secret) },
	} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, memory.New(), func(c *engine.Config) {
				c.CommitValidator = func(context.Context, *engine.CommitView) error { return fail() }
			})
			a := f.client("alice", "ca")
			for round := range 2 { // the replay answers the stored outcome
				pr, _ := pushOne(t, a, "c1", upsert("tasks", "t1", f.row("t1", "P", "x"), nil))
				if pr.Status != ssp2.CommitRejected || pr.Results[0].Code != "sync.constraint_violation" || pr.Results[0].Message != "whole-commit validator failed" {
					t.Fatalf("round %d: %+v", round, pr.Results)
				}
			}
		})
	}
}
