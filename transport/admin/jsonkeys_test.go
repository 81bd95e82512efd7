package admin_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/synclane/synclane/engine"
	adminsvc "github.com/synclane/synclane/engine/admin"
	"github.com/synclane/synclane/engine/blobs"
	"github.com/synclane/synclane/engine/cluster"
	"github.com/synclane/synclane/engine/events"
	"github.com/synclane/synclane/engine/operations"
	"github.com/synclane/synclane/protocol/opwire"
	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage/blobstore"
	"github.com/synclane/synclane/transport/admin"
	"github.com/synclane/synclane/transport/realtime"
)

// lowerCamel is an admin API key: lowerCamelCase, acronyms as words
// (partitionId, bytesIn, maxSeq), no underscores, dots or dashes.
var lowerCamel = regexp.MustCompile(`^[a-z][a-z0-9]*([A-Z][a-z0-9]+)*$`)

// dataKeys are the JSON paths (as camelKeys spells them, "[]" for any
// array element, "*" for any map key) whose object keys are data rather
// than field names: row values by column, scopes by variable, horizons by
// partition, counters by code, kind or reason. Their values are still
// walked.
var dataKeys = []string{
	"sections[].stats.executed",
	"sections[].stats.executed.*",
	"sections[].stats.refused",
	"sections[].stats.refused.*",
	"sections[].stats.closed",
	"requests.errors",
	"requests.retention.horizons",
	"retention.stats.horizons",
	"changeList[].row",
	"changeList[].scopes",
	"history[].change.row",
	"history[].change.scopes",
	"lease.allowedScopes",
	"sections[].stats.wakes",
	"values",
	"scopes",
	"members[].stats.forwarded",
	"members[].stats.served",
	"forwarded",
	"served",
}

// camelKeys walks v (a decoded JSON value) and returns every object key
// that is not lowerCamelCase, with its path; keys under a dataKeys path
// are data and not checked.
func camelKeys(path string, v any, bad *[]string) {
	switch x := v.(type) {
	case map[string]any:
		data := false
		for _, d := range dataKeys {
			data = data || d == path
		}
		for k, val := range x {
			sub := k
			if data {
				sub = "*"
			}
			if path != "" {
				sub = path + "." + sub
			}
			if !data && !lowerCamel.MatchString(k) {
				*bad = append(*bad, path+"."+k)
			}
			camelKeys(sub, val, bad)
		}
	case []any:
		for _, e := range x {
			camelKeys(path+"[]", e, bad)
		}
	}
}

func TestCamelKeysFlagsOtherSpellings(t *testing.T) {
	for _, tc := range []struct {
		doc  string
		want string
	}{
		{`{"nowMs":1,"partitionId":"p","bytesIn":2,"a":{"b":[{"cDe":1}]}}`, ""},
		{`{"CommitsApplied":1}`, ".CommitsApplied"},
		{`{"x":[{"snake_case":1}]}`, "x[].snake_case"},
		{`{"a":{"PartitionID":1}}`, "a.PartitionID"},
		{`{"partitionID":1}`, ".partitionID"},
		{`{"values":{"project_id":"x"}}`, ""},
		{`{"values":{"project_id":{"Bad":1}}}`, "values.*.Bad"},
	} {
		var v any
		if err := json.Unmarshal([]byte(tc.doc), &v); err != nil {
			t.Fatal(err)
		}
		var bad []string
		camelKeys("", v, &bad)
		if got := strings.Join(bad, ","); got != tc.want {
			t.Errorf("%s: flagged %q, want %q", tc.doc, got, tc.want)
		}
	}
}

// keysSchema has a synced table and a table with a blob column, so the row
// inspector shows blobs.
const keysSchema = `{"version":1,"tables":[
 {"name":"tasks","columns":[
   {"name":"id","type":"string"},{"name":"project_id","type":"string"},
   {"name":"title","type":"string"},{"name":"done","type":"boolean","nullable":true}],
  "primaryKey":"id","scopes":["project:{project_id}"]},
 {"name":"files","columns":[{"name":"id","type":"string"},{"name":"project_id","type":"string"},
   {"name":"file","type":"blob_ref","nullable":true}],"primaryKey":"id","scopes":["project:{project_id}"]}]}`

// Every admin API answer (every route, with every feature on: reactions,
// leases, blobs, remote operations, realtime, an event on the stream, the
// request time series, the error body) spells its keys lowerCamelCase, so
// a Go struct serialized without json tags cannot slip in.
func TestEveryAdminAnswerIsLowerCamelCase(t *testing.T) {
	sch, err := schema.Parse([]byte(keysSchema))
	if err != nil {
		t.Fatal(err)
	}
	hub := realtime.New(realtime.Options{})
	t.Cleanup(func() { hub.Close() })
	s := newServerWith(t, backends[1].open(t), func(c *engine.Config) {
		failingReactions(c)
		c.Schema, c.Resolver = sch, engine.AllowAll(sch)
		c.Leases.TTL, c.Leases.Key = time.Hour, []byte("0123456789abcdef0123456789abcdef")
		fs, err := blobstore.NewFS(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		c.Blobs = blobs.Options{Store: fs, MaxBytes: 1 << 20}
		reg := operations.NewRegistry(c.Schema)
		if err := reg.AddCommand(operations.Command{ID: "archive",
			Authorize: func(context.Context, operations.Caller, any) (bool, error) { return false, nil },
			Run:       func(context.Context, operations.Invocation) ([]operations.Mutation, error) { return nil, nil }}); err != nil {
			t.Fatal(err)
		}
		c.Operations.Registry = reg
		hub.Hooks(c)
	})
	s.service.Register(adminsvc.Section{Name: "realtime", Stats: func(context.Context) (any, error) { return hub.Stats(), nil }})

	s.push("acme", "ada", "laptop", "c1", "t1", "roadmap", "first")
	s.push("dead", "ada", "laptop", "d1", "t1", "roadmap", "doomed")
	body := []byte("report bytes")
	id := blobstore.IDOf(body)
	if err := s.eng.Blobs().Upload(context.Background(), id, "application/pdf", int64(len(body)), 0, bytes.NewReader(body)); err != nil {
		t.Fatal(err)
	}
	codec := ssp2.NewRowCodec(sch.Table("files").Columns)
	payload, err := codec.AppendSparse(nil, ssp2.Row{"f1", "roadmap", fmt.Sprintf(`{"blobId":%q,"byteLength":%d}`, id, len(body))}, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.client("acme", "ada", "laptop").Push(context.Background(), &ssp2.PushCommit{ClientCommitID: "f1",
		Operations: []ssp2.Operation{{Table: "files", RowID: "f1", Op: ssp2.OpUpsert, Payload: payload}}}); err != nil {
		t.Fatal(err)
	}
	// A rejected push: an error counter and a push.rejected event.
	if _, err := s.client("acme", "eve", "intruder").Push(context.Background(), &ssp2.PushCommit{ClientCommitID: "bad",
		Operations: []ssp2.Operation{{Table: "nope", RowID: "x", Op: ssp2.OpDelete}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.eng.Operations().Run(context.Background(), engine.Identity{ActorID: "ada", Partition: "acme"},
		&opwire.Request{Kind: opwire.KindCommand, ClientID: "laptop", OperationID: "archive", RequestID: "r1"}); err == nil {
		t.Fatal("the refused command ran")
	}
	eventually(t, "a dead letter", func() bool {
		st, _ := s.eng.Reactions().Stats(context.Background())
		return st.Dead == 1
	})
	var dead adminsvc.ReactionsView
	s.ok("GET", "/api/reactions?state=dead", &dead)
	if len(dead.Items) != 1 {
		t.Fatalf("dead letters: %+v", dead.Items)
	}

	routes := []struct{ method, path string }{
		{"GET", "/api/overview"},
		{"GET", "/api/partitions"},
		{"GET", "/api/partitions/acme"},
		{"GET", "/api/partitions/acme/clients"},
		{"GET", "/api/partitions/acme/clients/laptop"},
		{"GET", "/api/partitions/acme/commits"},
		{"GET", "/api/partitions/acme/commits/1"},
		{"GET", "/api/partitions/acme/rows/tasks/t1"},
		{"GET", "/api/partitions/acme/rows/files/f1"},
		{"GET", "/api/partitions/acme/scopes"},
		{"GET", "/api/events"},
		{"GET", "/api/reactions"},
		{"GET", "/api/timeseries?seconds=60"},
		{"POST", "/api/maintenance?dryRun=true"},
		{"POST", "/api/partitions/acme/clients/laptop/revoke-lease"},
		{"POST", fmt.Sprintf("/api/reactions/%d/redrive", dead.Items[0].ID)},
		{"POST", "/api/partitions/acme/rotate-epoch"},
		{"GET", "/api/partitions/nowhere"},
	}
	for _, r := range routes {
		var v any
		st := s.call(r.method, r.path, testToken, &v)
		if st != http.StatusOK && r.path != "/api/partitions/nowhere" {
			t.Errorf("%s %s: status %d: %v", r.method, r.path, st, v)
			continue
		}
		var bad []string
		camelKeys("", v, &bad)
		sort.Strings(bad)
		if len(bad) > 0 {
			t.Errorf("%s %s: keys not lowerCamelCase: %s", r.method, r.path, strings.Join(bad, ", "))
		}
	}

	// The event stream's events.
	req, _ := http.NewRequest("GET", s.admin.URL+"/api/events/stream", nil)
	req.Header.Set("Authorization", "Bearer "+testToken)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := http.DefaultClient.Do(req.WithContext(ctx))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		var v any
		if err := json.Unmarshal([]byte(data), &v); err != nil {
			t.Fatalf("stream data %q: %v", data, err)
		}
		var bad []string
		camelKeys("", v, &bad)
		if len(bad) > 0 {
			t.Fatalf("event stream: keys not lowerCamelCase: %s in %s", strings.Join(bad, ", "), data)
		}
		break
	}
}

// The answers this test server cannot produce (GET /api/cluster and
// /api/cluster/events need a cluster; the realtime sockets section an open
// socket) are built from the same types: each, with every field set,
// marshals lowerCamelCase keys.
func TestClusterAndSocketTypesAreLowerCamelCase(t *testing.T) {
	for name, v := range map[string]any{
		"cluster stats": engine.ClusterStats{Self: "http://a", Members: []cluster.Member{{ID: "http://a", Incarnation: "x", StartedAtMs: 1}},
			Healthy: true, Forwarded: map[string]uint64{"sync": 1}, Served: map[string]uint64{"sync": 1}, Retries: 1},
		"cluster event": struct {
			Member string `json:"member"`
			events.Event
		}{"http://a", events.Event{Seq: 1, Kind: "push.rejected", Partition: "p", Actor: "a", Client: "c", Code: "x", Message: "m", DurationMs: 1, Source: "s", Suppressed: 1}},
		"cluster view": admin.ClusterView{Self: "http://a", Healthy: true, Forwarded: map[string]uint64{"sync": 1}, Served: map[string]uint64{"sync": 1},
			Partition: "p", Owner: "http://a", Members: []admin.ClusterMember{{Member: cluster.Member{ID: "http://a", Incarnation: "x", StartedAtMs: 1},
				Self: true, Reachable: true, Error: "e", Stats: &engine.ClusterStats{Self: "http://a", OwnershipLost: 1}}}},
		"ownership": adminsvc.OwnershipView{Self: "http://a", Partitions: 1, Owned: 1, OwnedList: []string{"p"}, OwnedTruncated: true, Unowned: 1,
			Members: []adminsvc.MemberOwnership{{Member: "http://a", Partitions: 1}}},
		"overview cluster":          adminsvc.Overview{Cluster: &adminsvc.ClusterSummary{Self: "http://a", Healthy: true, Leaving: true, Members: 1}},
		"partition in cluster mode": adminsvc.PartitionView{Partition: "p", Owner: "http://b", OwnedElsewhere: true},
		"realtime sockets":          []realtime.SessionInfo{{SessionID: "s", ActorID: "a", ClientID: "c", Keys: []string{"k"}, Live: true, Queued: 1}},
	} {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		var doc any
		if err := json.Unmarshal(b, &doc); err != nil {
			t.Fatal(err)
		}
		var bad []string
		camelKeys("", doc, &bad)
		if len(bad) > 0 {
			t.Errorf("%s: keys not lowerCamelCase: %s in %s", name, strings.Join(bad, ", "), b)
		}
	}
}
