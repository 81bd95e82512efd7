package storagetest

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"strconv"

	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage"
)

// item builds an items row with the scope columns set and every nullable
// column NULL.
func item(id, project string, owner int64) ssp2.Row {
	return ssp2.Row{id, project, owner, nil, nil, nil, nil, nil, nil, nil, nil, nil}
}

// itemCode is item with the unique "code" column set (nil for NULL).
func itemCode(id, project string, owner int64, code any) ssp2.Row {
	r := item(id, project, owner)
	r[11] = code
	return r
}

func note(id, project, body string) ssp2.Row { return ssp2.Row{id, project, body} }

// begin opens a PushTx or fails the test.
func (e *env) begin(partition string) storage.PushTx {
	e.t.Helper()
	tx, err := e.b.Log.BeginPush(e.ctx, partition)
	if err != nil {
		e.t.Fatalf("BeginPush(%q): %v", partition, err)
	}
	return tx
}

// push runs fn in a PushTx on partition and commits it.
func (e *env) push(partition string, fn func(tx storage.PushTx)) {
	e.t.Helper()
	tx := e.begin(partition)
	defer func() { _ = tx.Rollback(e.ctx) }()
	fn(tx)
	if err := tx.Commit(e.ctx); err != nil {
		e.t.Fatalf("Commit(%q): %v", partition, err)
	}
}

func (e *env) put(tx storage.PushTx, t *schema.Table, version int64, row ssp2.Row) {
	e.t.Helper()
	if err := tx.PutRow(e.ctx, t, storage.RowRecord{RowID: rowIDOf(e, t, row), Version: version, Values: row}); err != nil {
		e.t.Fatalf("PutRow(%s, %v): %v", t.Name, row[t.PK], err)
	}
}

// rowIDOf renders row's primary key as its row id, or fails the test.
func rowIDOf(e *env, t *schema.Table, row ssp2.Row) string {
	e.t.Helper()
	id, ok := t.RowID(row)
	if !ok {
		e.t.Fatalf("row %v of %s: its key %v renders no row id", row, t.Name, row[t.PK])
	}
	return id
}

// must fails the test on a non-nil err.
func (e *env) must(err error) {
	e.t.Helper()
	if err != nil {
		e.t.Fatal(err)
	}
}

// appendNext appends a commit with seq MaxCommitSeq+1 and returns its seq.
func (e *env) appendNext(tx storage.PushTx, changes ...storage.ChangeRecord) int64 {
	e.t.Helper()
	seq := tx.Partition().MaxCommitSeq + 1
	c := storage.CommitRecord{
		Seq: seq, CreatedAtMs: 1_700_000_000_000 + seq, ActorID: "actor-" + strconv.FormatInt(seq, 10),
		ClientID: "client", ClientCommitID: "cc-" + strconv.FormatInt(seq, 10), Changes: changes,
	}
	if err := tx.AppendCommit(e.ctx, c); err != nil {
		e.t.Fatalf("AppendCommit(seq %d): %v", seq, err)
	}
	if got := tx.Partition().MaxCommitSeq; got != seq {
		e.t.Fatalf("Partition().MaxCommitSeq after AppendCommit(%d) = %d", seq, got)
	}
	return seq
}

// commitChanges appends one committed commit and returns its seq.
func (e *env) commitChanges(partition string, changes ...storage.ChangeRecord) int64 {
	e.t.Helper()
	var seq int64
	e.push(partition, func(tx storage.PushTx) { seq = e.appendNext(tx, changes...) })
	return seq
}

func (e *env) getRow(tx storage.PushTx, t *schema.Table, id string) *storage.RowRecord {
	e.t.Helper()
	r, err := tx.GetRow(e.ctx, t, id)
	if err != nil {
		e.t.Fatalf("GetRow(%s, %q): %v", t.Name, id, err)
	}
	return r
}

// committedRow reads a row through a fresh PushTx that it rolls back.
func (e *env) committedRow(partition string, t *schema.Table, id string) *storage.RowRecord {
	e.t.Helper()
	tx := e.begin(partition)
	defer func() { _ = tx.Rollback(e.ctx) }()
	return e.getRow(tx, t, id)
}

func (e *env) readPartition(partition string) storage.PartitionInfo {
	e.t.Helper()
	p, err := e.b.Log.ReadPartition(e.ctx, partition)
	if err != nil {
		e.t.Fatalf("ReadPartition(%q): %v", partition, err)
	}
	return p
}

func (e *env) touch(partition string) storage.PartitionInfo {
	e.t.Helper()
	p, err := e.b.Log.TouchPartition(e.ctx, partition, 1000)
	if err != nil {
		e.t.Fatalf("TouchPartition(%q): %v", partition, err)
	}
	return p
}

func (e *env) scanChanges(partition string, q storage.ChangeQuery) storage.ChangeScan {
	e.t.Helper()
	r, err := e.b.Log.ScanChanges(e.ctx, partition, q)
	if err != nil {
		e.t.Fatalf("ScanChanges(%q, %+v): %v", partition, q, err)
	}
	return r
}

func (e *env) scanRows(partition string, q storage.RowQuery) []storage.RowRecord {
	e.t.Helper()
	r, err := e.b.Rows.ScanRows(e.ctx, partition, q)
	if err != nil {
		e.t.Fatalf("ScanRows(%q): %v", partition, err)
	}
	return r
}

// upsert builds an upsert change whose row bytes name the row.
func upsert(table, rowID string, version int64, scopes map[string]string) storage.ChangeRecord {
	return storage.ChangeRecord{Table: table, RowID: rowID, Op: ssp2.OpUpsert, RowVersion: version,
		Scopes: scopes, Row: []byte("row\x00" + table + "/" + rowID)}
}

func del(table, rowID string, scopes map[string]string) storage.ChangeRecord {
	return storage.ChangeRecord{Table: table, RowID: rowID, Op: ssp2.OpDelete, Scopes: scopes}
}

func sc(kv ...string) map[string]string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return m
}

// rowEqual compares rows exactly, including Go types and nil vs empty.
func rowEqual(a, b ssp2.Row) bool { return reflect.DeepEqual(a, b) }

func fmtRow(r ssp2.Row) string {
	var b bytes.Buffer
	b.WriteString("[")
	for i, v := range r {
		if i > 0 {
			b.WriteString(", ")
		}
		switch x := v.(type) {
		case []byte:
			if x == nil {
				b.WriteString("[]byte(nil)")
			} else {
				fmt.Fprintf(&b, "[]byte(%q)", x)
			}
		default:
			fmt.Fprintf(&b, "%T(%#v)", v, v)
		}
	}
	b.WriteString("]")
	return b.String()
}

func (e *env) wantRow(what string, got *storage.RowRecord, want storage.RowRecord) {
	e.t.Helper()
	if got == nil {
		e.t.Fatalf("%s: row %q missing", what, want.RowID)
	}
	if got.RowID != want.RowID || got.Version != want.Version || !rowEqual(got.Values, want.Values) {
		e.t.Fatalf("%s: got {%q v%d %s}\nwant {%q v%d %s}", what, got.RowID, got.Version, fmtRow(got.Values),
			want.RowID, want.Version, fmtRow(want.Values))
	}
}

func changeEqual(a, b storage.ChangeRecord) bool {
	if a.Table != b.Table || a.RowID != b.RowID || a.Op != b.Op || a.RowVersion != b.RowVersion {
		return false
	}
	if !bytes.Equal(a.Row, b.Row) || (a.Op == ssp2.OpUpsert && (a.Row == nil) != (b.Row == nil)) {
		return false
	}
	if len(a.Scopes) != len(b.Scopes) {
		return false
	}
	for k, v := range a.Scopes {
		if w, ok := b.Scopes[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// wantScan compares a ChangeScan with the expected commits (by seq and
// changes; CreatedAtMs and ActorID follow appendNext's pattern).
func (e *env) wantScan(what string, got storage.ChangeScan, truncated *bool, want ...storage.CommitChanges) {
	e.t.Helper()
	fail := func(msg string, args ...any) {
		e.t.Helper()
		e.t.Fatalf("%s: %s\ngot:  %s\nwant: %s", what, fmt.Sprintf(msg, args...), fmtCommits(got.Commits), fmtCommits(want))
	}
	if len(got.Commits) != len(want) {
		fail("got %d commits, want %d", len(got.Commits), len(want))
	}
	for i := range want {
		g, w := got.Commits[i], want[i]
		if g.Seq != w.Seq || g.CreatedAtMs != 1_700_000_000_000+w.Seq || g.ActorID != "actor-"+strconv.FormatInt(w.Seq, 10) {
			fail("commit %d header: seq %d createdAt %d actor %q", i, g.Seq, g.CreatedAtMs, g.ActorID)
		}
		if len(g.Changes) != len(w.Changes) {
			fail("commit seq %d: %d changes, want %d", w.Seq, len(g.Changes), len(w.Changes))
		}
		for j := range w.Changes {
			if !changeEqual(g.Changes[j], w.Changes[j]) {
				fail("commit seq %d change %d: got %+v want %+v", w.Seq, j, g.Changes[j], w.Changes[j])
			}
		}
	}
	if truncated != nil && got.Truncated != *truncated {
		fail("Truncated = %v, want %v", got.Truncated, *truncated)
	}
}

func fmtCommits(cs []storage.CommitChanges) string {
	var b bytes.Buffer
	for _, c := range cs {
		fmt.Fprintf(&b, "{seq %d:", c.Seq)
		for _, ch := range c.Changes {
			fmt.Fprintf(&b, " %s/%s", ch.Table, ch.RowID)
		}
		b.WriteString("} ")
	}
	return b.String()
}

func cc(seq int64, changes ...storage.ChangeRecord) storage.CommitChanges {
	return storage.CommitChanges{Seq: seq, Changes: changes}
}

func ptr[T any](v T) *T { return &v }

func wantErrIs(e *env, what string, err, target error) {
	e.t.Helper()
	if !errors.Is(err, target) {
		e.t.Fatalf("%s: err = %v, want errors.Is %v", what, err, target)
	}
}
