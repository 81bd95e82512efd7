package partition

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/storage"
)

func testSchema(t *testing.T) *schema.Schema {
	t.Helper()
	s, err := schema.Parse([]byte(`{"version":1,"tables":[
	 {"name":"tasks","columns":[{"name":"id","type":"string"},{"name":"project_id","type":"string"},{"name":"team","type":"string","nullable":true},{"name":"title","type":"string"}],
	  "primaryKey":"id","scopes":["project:{project_id}",{"pattern":"team:{team_id}","column":"team"}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestEffective(t *testing.T) {
	cases := []struct {
		name      string
		requested map[string][]string
		allowed   Allowed
		resolved  bool
		want      map[string][]string
		revoked   bool
	}{
		{"intersect", map[string][]string{"project_id": {"p2", "p1", "p3"}}, Allowed{"project_id": {"p3", "p1"}}, true, map[string][]string{"project_id": {"p1", "p3"}}, false},
		{"wildcard passes requested through in order", map[string][]string{"project_id": {"b", "a"}}, Allowed{"project_id": {"*"}}, true, map[string][]string{"project_id": {"b", "a"}}, false},
		{"empty intersection revokes", map[string][]string{"project_id": {"p2"}}, Allowed{"project_id": {"p1"}}, true, map[string][]string{}, true},
		{"key not allowed revokes", map[string][]string{"project_id": {"p1"}, "team_id": {"t"}}, Allowed{"project_id": {"p1"}}, true, map[string][]string{}, true},
		{"resolver failure revokes", map[string][]string{"project_id": {"p1"}}, Allowed{"project_id": {"p1"}}, false, map[string][]string{}, true},
		{"nothing requested revokes", map[string][]string{}, Allowed{"project_id": {"*"}}, true, map[string][]string{}, true},
		{"two vars", map[string][]string{"project_id": {"p1"}, "team_id": {"t1", "t2"}}, Allowed{"project_id": {"*"}, "team_id": {"t2"}}, true, map[string][]string{"project_id": {"p1"}, "team_id": {"t2"}}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, revoked := Effective(c.requested, c.allowed, c.resolved)
			if revoked != c.revoked || !reflect.DeepEqual(got, c.want) {
				t.Fatalf("Effective = %v, %v; want %v, %v", got, revoked, c.want, c.revoked)
			}
		})
	}
}

func TestValidateRequestedAndAllowed(t *testing.T) {
	s := testSchema(t)
	tb := s.Table("tasks")
	if err := ValidateRequested(tb, map[string][]string{"project_id": {"p"}}); err != nil {
		t.Fatalf("valid request refused: %v", err)
	}
	for name, req := range map[string]map[string][]string{
		"undeclared key": {"nope": {"x"}},
		"wildcard":       {"project_id": {"*"}},
	} {
		if err := ValidateRequested(tb, req); err == nil || err.Code != syncerr.InvalidSubscription {
			t.Fatalf("%s: got %v, want invalid_subscription", name, err)
		}
	}
	if err := ValidateAllowed(s, Allowed{"project_id": {"*"}, "team_id": {"t"}}); err != nil {
		t.Fatalf("valid allowed refused: %v", err)
	}
	if err := ValidateAllowed(s, Allowed{"org": {"o"}}); err == nil || err.Code != syncerr.InvalidSubscription {
		t.Fatalf("undeclared resolver key: got %v", err)
	}
}

func TestAuthorizeRowAndScopes(t *testing.T) {
	tb := testSchema(t).Table("tasks")
	row := ssp2.Row{"r1", "p1", "t1", "hello"}
	cases := []struct {
		name     string
		row      ssp2.Row
		allowed  Allowed
		resolved bool
		ok       bool
	}{
		{"all allowed", row, Allowed{"project_id": {"p1"}, "team_id": {"t1"}}, true, true},
		{"wildcards", row, Allowed{"project_id": {"*"}, "team_id": {"*"}}, true, true},
		{"one var denied", row, Allowed{"project_id": {"p1"}, "team_id": {"t2"}}, true, false},
		{"var missing from allowed", row, Allowed{"project_id": {"p1"}}, true, false},
		{"null scope value denied", ssp2.Row{"r1", "p1", nil, "x"}, Allowed{"project_id": {"*"}, "team_id": {"*"}}, true, false},
		{"empty scope value denied", ssp2.Row{"r1", "", "t1", "x"}, Allowed{"project_id": {"*"}, "team_id": {"*"}}, true, false},
		{"resolver failed", row, Allowed{"project_id": {"*"}, "team_id": {"*"}}, false, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := AuthorizeRow(tb, c.row, c.allowed, c.resolved)
			if c.ok != (err == nil) {
				t.Fatalf("AuthorizeRow = %v, want ok=%v", err, c.ok)
			}
			if err != nil && err.Code != syncerr.Forbidden {
				t.Fatalf("code %s, want sync.forbidden", err.Code)
			}
		})
	}
	sc, err := ExtractScopes(tb, row)
	if err != nil || !reflect.DeepEqual(sc, map[string]string{"project_id": "p1", "team_id": "t1"}) {
		t.Fatalf("ExtractScopes = %v, %v", sc, err)
	}
	if _, err := ExtractScopes(tb, ssp2.Row{"r1", "p1", nil, "x"}); err == nil || err.Code != syncerr.MissingScopes {
		t.Fatalf("ExtractScopes of NULL scope = %v, want missing_scopes", err)
	}
}

// TestDecideUpdate: the version rules against an existing row (SPEC §6.2
// steps 3-6).
func TestDecideUpdate(t *testing.T) {
	v := func(n int64) *int64 { return &n }
	some := ssp2.ColumnSet{0x02}
	none := ssp2.ColumnSet{0x00}
	cases := []struct {
		name      string
		stored    int64
		base      *int64
		contended ssp2.ColumnSet
		want      UpsertVerdict
		code      syncerr.Code
	}{
		{"no base: last write wins", 7, nil, none, ApplyUpdate, ""},
		{"base ahead of the server", 3, v(4), none, BaseAhead, syncerr.InvalidRequest},
		{"base 0: lost insert race", 1, v(0), none, Conflict, ""},
		{"base 0 with contended columns", 5, v(0), some, Conflict, ""},
		{"base current", 3, v(3), none, ApplyUpdate, ""},
		{"base stale, nothing present moved", 7, v(3), none, ApplyUpdate, ""},
		{"base stale, a present column moved", 7, v(3), some, Conflict, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := DecideUpdate(c.stored, c.base, c.contended)
			if got != c.want {
				t.Fatalf("DecideUpdate = %v, want %v", got, c.want)
			}
			err := VerdictError(got, 2, c.stored, c.base)
			if (c.code == "") != (err == nil) || (err != nil && err.Code != c.code) {
				t.Fatalf("VerdictError = %v, want %q", err, c.code)
			}
		})
	}
}

// TestDecideInsert: the absent-row table of SPEC §6.2.
func TestDecideInsert(t *testing.T) {
	v := func(n int64) *int64 { return &n }
	cases := []struct {
		name          string
		base          *int64
		tomb, horizon int64
		full          bool
		want          UpsertVerdict
		code          syncerr.Code
	}{
		{"base 0 inserts", v(0), 0, 0, true, ApplyInsert, ""},
		{"base 0 recreates over a tombstone", v(0), 9, 2, true, ApplyInsert, ""},
		{"base 0 partial", v(0), 0, 0, false, Missing, syncerr.RowMissing},
		{"base above 0", v(3), 0, 0, true, Missing, syncerr.RowMissing},
		{"base above 0 over a tombstone", v(3), 9, 2, true, Missing, syncerr.RowMissing},
		{"no base, live tombstone", nil, 9, 2, true, Deleted, syncerr.RowDeleted},
		{"no base, live tombstone, partial", nil, 9, 2, false, Deleted, syncerr.RowDeleted},
		{"no base, tombstone at the horizon", nil, 2, 2, true, ApplyInsert, ""},
		{"no base, no tombstone, full", nil, 0, 0, true, ApplyInsert, ""},
		{"no base, no tombstone, partial", nil, 0, 0, false, Missing, syncerr.RowMissing},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := DecideInsert(c.base, c.tomb, c.horizon, c.full)
			if got != c.want {
				t.Fatalf("DecideInsert = %v, want %v", got, c.want)
			}
			err := VerdictError(got, 0, 0, c.base)
			if (c.code == "") != (err == nil) || (err != nil && err.Code != c.code) {
				t.Fatalf("VerdictError = %v, want %q", err, c.code)
			}
		})
	}
}

// TestContendedColumns: a present non-crdt, non-key column whose version
// exceeds baseVersion contends; nothing else does (SPEC §6.2, §6.3).
func TestContendedColumns(t *testing.T) {
	tb := crdtTable(t) // id(pk) p n f b j raw doc(crdt) other(crdt)
	versions := []int64{1, 1, 5, 2, 3, 1, 6, 9, 9}
	present := ssp2.FullColumnSet(9)
	got := ContendedColumns(tb, present, versions, 2)
	want := ssp2.ColumnSet{1<<2 | 1<<4 | 1<<6, 0}
	if !bytes.Equal(got, want) {
		t.Fatalf("ContendedColumns = %08b, want %08b", got, want)
	}
	sparse := ssp2.NewColumnSet(9)
	sparse.Add(0)
	sparse.Add(3)
	sparse.Add(7)
	if got := ContendedColumns(tb, sparse, versions, 1); got.Len() != 1 || !got.Has(3) {
		t.Fatalf("sparse: ContendedColumns = %08b, want only column 3", got)
	}
	if got := ContendedColumns(tb, sparse, versions, 0); got.Len() != 1 || !got.Has(3) {
		t.Fatalf("base 0: ContendedColumns = %08b, want every present non-crdt non-key column (3)", got)
	}
	crdtOnly := ssp2.NewColumnSet(9)
	crdtOnly.Add(0)
	crdtOnly.Add(7)
	if got := ContendedColumns(tb, crdtOnly, versions, 1); got.Len() != 0 {
		t.Fatalf("crdt-only patch contended %08b", got)
	}
	if got := ContendableColumns(tb); got.Len() != 6 || got.Has(0) || got.Has(7) || got.Has(8) {
		t.Fatalf("ContendableColumns = %08b", got)
	}
}

func TestCheckEpoch(t *testing.T) {
	e := func(s string) *string { return &s }
	cases := []struct {
		name     string
		wire     uint16
		client   *string
		stored   string
		required bool
		want     EpochVerdict
	}{
		{"v1 not required", 1, nil, "E", false, EpochProceed},
		{"v1 required", 1, nil, "E", true, EpochWireUnsupported},
		{"v2 match", 2, e("E"), "E", true, EpochProceed},
		{"v2 acquisition", 2, nil, "E", false, EpochReset},
		{"v2 mismatch", 2, e("old"), "E", false, EpochReset},
	}
	for _, c := range cases {
		if got := CheckEpoch(c.wire, c.client, c.stored, c.required); got != c.want {
			t.Errorf("%s: CheckEpoch = %v, want %v", c.name, got, c.want)
		}
	}
}

func TestCheckClientID(t *testing.T) {
	if err := CheckClientID(`["remote-command","a"]`, "a", ""); err == nil || err.Code != syncerr.InvalidClientID {
		t.Fatalf("remote-command prefix: %v", err)
	}
	if err := CheckClientID("c1", "a", "b"); err == nil || err.Code != syncerr.InvalidClientID {
		t.Fatalf("bound to another actor: %v", err)
	}
	if err := CheckClientID("c1", "a", "a"); err != nil {
		t.Fatalf("same actor refused: %v", err)
	}
	if err := CheckClientID("c1", "a", ""); err != nil {
		t.Fatalf("unbound refused: %v", err)
	}
	if !NeedsFloor(1, 2, 3) || !NeedsFloor(4, 2, 3) || NeedsFloor(2, 2, 3) {
		t.Fatal("NeedsFloor bounds wrong")
	}
}

func TestPullModeAndToken(t *testing.T) {
	cases := []struct {
		cursor       int64
		token        bool
		horizon, max int64
		want         PullMode
	}{
		{-1, false, 0, 10, Bootstrap},
		{5, true, 0, 10, Bootstrap},
		{11, false, 0, 10, Bootstrap},
		{3, false, 5, 10, Reset},
		{5, false, 5, 10, Incremental},
		{10, false, 0, 10, Incremental},
	}
	for _, c := range cases {
		if got := ChoosePullMode(c.cursor, c.token, c.horizon, c.max); got != c.want {
			t.Errorf("ChoosePullMode(%d,%v,%d,%d) = %v, want %v", c.cursor, c.token, c.horizon, c.max, got, c.want)
		}
	}
	rc := "r-9"
	good := BootstrapToken{AsOfCommitSeq: 8, Tables: []string{"tasks"}, RowCursor: &rc}.Encode()
	if tok, ok := ResumeToken(good, "tasks", 0, 10); !ok || tok.AsOfCommitSeq != 8 || *tok.RowCursor != "r-9" {
		t.Fatalf("ResumeToken(good) = %+v, %v", tok, ok)
	}
	for name, c := range map[string]struct {
		raw          json.RawMessage
		horizon, max int64
	}{
		"garbage":       {json.RawMessage(`{"asOf`), 0, 10},
		"other table":   {BootstrapToken{AsOfCommitSeq: 8, Tables: []string{"x"}}.Encode(), 0, 10},
		"pin < horizon": {good, 9, 10},
		"pin > max":     {good, 0, 7},
		"image lane":    {BootstrapToken{AsOfCommitSeq: 8, Tables: []string{"tasks"}, RowCursor: &rc, Lane: LaneSQLite}.Encode(), 0, 10},
		"unknown lane":  {BootstrapToken{AsOfCommitSeq: 8, Tables: []string{"tasks"}, RowCursor: &rc, Lane: "carrier-pigeon"}.Encode(), 0, 10},
	} {
		if _, ok := ResumeToken(c.raw, "tasks", c.horizon, c.max); ok {
			t.Errorf("%s: token resumed, want restart", name)
		}
	}
}

func TestServeGate(t *testing.T) {
	p := func(part, name string) storage.CheckpointRef {
		return storage.CheckpointRef{Partition: part, Name: name}
	}
	decl := []storage.CheckpointDeclaration{{Partition: "a", Name: "proj", SchemaVersion: 2}}
	cases := []struct {
		name string
		gate storage.ServeGate
		want RefusalKind // 0: serve
	}{
		{"open", storage.ServeGate{StoredSchemaVersion: 2, LogEpoch: "e"}, 0},
		{"older stored version is migrated, not refused", storage.ServeGate{StoredSchemaVersion: 1}, 0},
		{"newer stored version", storage.ServeGate{StoredSchemaVersion: 3}, RefuseSchema},
		{"own pending checkpoint serves", storage.ServeGate{StoredSchemaVersion: 2, Pending: []storage.CheckpointRef{p("a", "proj")}}, 0},
		{"foreign pending checkpoint", storage.ServeGate{StoredSchemaVersion: 2, Pending: []storage.CheckpointRef{p("a", "proj"), p("b", "other")}}, RefuseCheckpoint},
		{"same name other partition", storage.ServeGate{StoredSchemaVersion: 2, Pending: []storage.CheckpointRef{p("b", "proj")}}, RefuseCheckpoint},
	}
	for _, c := range cases {
		r := GateRefusal(c.gate, 2, decl)
		if (r == nil) != (c.want == 0) || (r != nil && r.Kind != c.want) {
			t.Errorf("%s: refusal %+v, want kind %d", c.name, r, c.want)
		}
	}
	if GateRefusal(storage.ServeGate{Pending: []storage.CheckpointRef{p("a", "proj")}}, 2, nil) == nil {
		t.Error("an empty declaration set bypassed a pending checkpoint")
	}
	before := TokenOf(storage.ServeGate{StoredSchemaVersion: 2, LogEpoch: "e1"})
	if r := VerifyGate(before, storage.ServeGate{StoredSchemaVersion: 2, LogEpoch: "e1"}, 2, nil); r != nil {
		t.Errorf("unchanged token refused: %+v", r)
	}
	if r := VerifyGate(before, storage.ServeGate{StoredSchemaVersion: 2, LogEpoch: "e2"}, 2, nil); r == nil || r.Kind != RefuseEpoch {
		t.Errorf("epoch change not refused: %+v", r)
	}
	if r := VerifyGate(before, storage.ServeGate{StoredSchemaVersion: 3, LogEpoch: "e1"}, 2, nil); r == nil || r.Kind != RefuseSchema {
		t.Errorf("migration during the build not refused: %+v", r)
	}
	e := (&Refusal{Kind: RefuseCheckpoint, Checkpoint: p("a", "proj")}).Error()
	if e.Code != syncerr.SchemaNotReady || string(e.Details) != `{"partition":"a","projection":"proj"}` || !e.Spec().Retryable || e.Spec().HTTPStatus != 503 {
		t.Errorf("checkpoint refusal error = %+v %s", e, e.Details)
	}
	if e := (&Refusal{Kind: RefuseEpoch}).Error(); string(e.Details) != `{"logEpochChanged":true}` {
		t.Errorf("epoch refusal details = %s", e.Details)
	}
	if e := (&Refusal{Kind: RefuseSchema, StoredVersion: 2, RunningVersion: 1}).Error(); string(e.Details) != `{"runningSchemaVersion":1,"storedSchemaVersion":2}` {
		t.Errorf("schema refusal details = %s", e.Details)
	}
}
