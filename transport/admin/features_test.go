package admin_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/synclane/synclane/engine"
	adminsvc "github.com/synclane/synclane/engine/admin"
	"github.com/synclane/synclane/engine/blobs"
	"github.com/synclane/synclane/engine/operations"
	"github.com/synclane/synclane/engine/reactions"
	"github.com/synclane/synclane/protocol/opwire"
	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/storage"
	"github.com/synclane/synclane/storage/blobstore"
	"github.com/synclane/synclane/storage/memory"
)

// eventually polls cond until it holds or a hang guard of 30s passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// failingReactions schedules one "notify" reaction per commit: one
// attempt in partition "dead" (dead-lettered at once), 100 attempts an
// hour apart elsewhere (retrying); the handler always fails.
func failingReactions(c *engine.Config) {
	c.CommitValidator = func(ctx context.Context, v *engine.CommitView) error {
		attempts := 100
		if v.Partition == "dead" {
			attempts = 1
		}
		return v.React(engine.Reaction{Name: "notify", Payload: []byte(v.ClientCommitID), MaxAttempts: attempts})
	}
	c.Reactions = reactions.Options{Handlers: map[string]reactions.Handler{
		"notify": func(context.Context, reactions.Stored) error { return errors.New("smtp server unreachable") },
	}, Lease: 5 * time.Second, PollInterval: 10 * time.Millisecond, BaseBackoff: time.Hour, MaxBackoff: time.Hour}
}

// The reactions endpoint lists stored reactions with their state,
// attempts, next attempt time and last error, pages by id, filters by
// state and partition, refuses a bad filter in words, and the overview
// carries the queue's counts.
func TestReactionsEndpoint(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			s := newServerWith(t, b.open(t), failingReactions)
			for i := range 3 {
				s.push("dead", "ada", "c1", fmt.Sprint("d", i), fmt.Sprint("t", i), "P", "x")
			}
			for i := range 2 {
				s.push("live", "ada", "c2", fmt.Sprint("r", i), fmt.Sprint("t", i), "P", "x")
			}
			eventually(t, "3 dead letters and 2 retrying reactions", func() bool {
				var v adminsvc.ReactionsView
				s.ok("GET", "/api/reactions?state=retrying", &v)
				st, _ := s.eng.Reactions().Stats(context.Background())
				return st.Dead == 3 && len(v.Items) == 2
			})
			now := time.Now().UnixMilli()

			var all []adminsvc.ReactionView
			after, pages := "", 0
			for {
				var v adminsvc.ReactionsView
				s.ok("GET", "/api/reactions?limit=2&after="+after, &v)
				if !v.Enabled || v.Stats == nil || v.Stats.Dead != 3 || v.Stats.Pending != 2 {
					t.Fatalf("page %d: enabled %v stats %+v", pages, v.Enabled, v.Stats)
				}
				if len(v.Items) > 2 {
					t.Fatalf("page of %d, asked for 2", len(v.Items))
				}
				all = append(all, v.Items...)
				pages++
				if v.Next == "" {
					break
				}
				after = v.Next
			}
			if pages != 3 || len(all) != 5 {
				t.Fatalf("%d pages, %d reactions; want 3 pages of 5", pages, len(all))
			}
			for i, r := range all {
				if i > 0 && r.ID <= all[i-1].ID {
					t.Fatalf("ids not ascending: %d after %d", r.ID, all[i-1].ID)
				}
				if r.Name != "notify" || r.Attempts != 1 || r.LastError != "smtp server unreachable" || r.CommitSeq < 1 {
					t.Fatalf("reaction %+v", r)
				}
				switch r.Partition {
				case "dead":
					if r.State != "dead" || r.MaxAttempts != 1 {
						t.Fatalf("dead-lettered reaction %+v", r)
					}
				case "live":
					if r.State != "retrying" || r.MaxAttempts != 100 || r.NextAttemptAtMs < now+30*60*1000 {
						t.Fatalf("retrying reaction %+v (next attempt should be about an hour away)", r)
					}
				default:
					t.Fatalf("reaction of partition %q", r.Partition)
				}
			}

			filters := []struct {
				query string
				want  int
			}{
				{"state=dead", 3}, {"state=retrying", 2}, {"state=pending", 2},
				{"partition=live", 2}, {"partition=dead&state=retrying", 0}, {"partition=nobody", 0},
			}
			for _, f := range filters {
				var v adminsvc.ReactionsView
				s.ok("GET", "/api/reactions?"+f.query, &v)
				if len(v.Items) != f.want {
					t.Fatalf("%s: %d reactions, want %d", f.query, len(v.Items), f.want)
				}
			}
			s.wantError("GET", "/api/reactions?state=lost", http.StatusBadRequest, "admin.invalid_argument")
			s.wantError("GET", "/api/reactions?after=x", http.StatusBadRequest, "admin.invalid_argument")

			var o struct {
				Sections []struct {
					Name  string
					Stats reactions.Stats
				}
			}
			s.ok("GET", "/api/overview", &o)
			found := false
			for _, sec := range o.Sections {
				if sec.Name == "reactions" {
					found = true
					if sec.Stats.Dead != 3 || sec.Stats.Pending != 2 || sec.Stats.DeadLettered != 3 {
						t.Fatalf("overview reactions section %+v", sec.Stats)
					}
				}
			}
			if !found {
				t.Fatalf("no reactions section in the overview: %+v", o.Sections)
			}

			// Dead-letter actions: a redriven dead letter is attempted again
			// (and, its handler still failing, dead-lettered again); a deleted
			// one is gone; neither applies to a retrying reaction.
			var deadIDs, liveIDs []int64
			for _, r := range all {
				if r.State == "dead" {
					deadIDs = append(deadIDs, r.ID)
				} else {
					liveIDs = append(liveIDs, r.ID)
				}
			}
			s.ok("POST", fmt.Sprintf("/api/reactions/%d/redrive", deadIDs[0]), nil)
			eventually(t, "the redriven reaction dead-lettered again", func() bool {
				st, _ := s.eng.Reactions().Stats(context.Background())
				return st.DeadLettered == 4 && st.Dead == 3
			})
			s.ok("POST", fmt.Sprintf("/api/reactions/%d/delete", deadIDs[1]), nil)
			var dead adminsvc.ReactionsView
			s.ok("GET", "/api/reactions?state=dead", &dead)
			if len(dead.Items) != 2 || dead.Items[0].ID != deadIDs[0] || dead.Items[1].ID != deadIDs[2] ||
				dead.Items[0].Attempts != 2 || dead.Items[0].MaxAttempts != 2 { // the redrive's one more attempt, counted on from the first
				t.Fatalf("dead letters after redrive and delete: %+v", dead.Items)
			}
			s.wantError("POST", fmt.Sprintf("/api/reactions/%d/delete", deadIDs[1]), http.StatusNotFound, "admin.not_found")
			s.wantError("POST", fmt.Sprintf("/api/reactions/%d/redrive", liveIDs[0]), http.StatusNotFound, "admin.not_found")
			s.wantError("POST", fmt.Sprintf("/api/reactions/%d/resurrect", deadIDs[0]), http.StatusBadRequest, "admin.invalid_argument")
			s.wantError("POST", "/api/reactions/x/redrive", http.StatusBadRequest, "admin.invalid_argument")
			found = false
			for _, e := range s.ring.Recent(0, 0) {
				found = found || e.Kind == adminsvc.ReactionActed
			}
			if !found {
				t.Fatal("no dead-letter action event")
			}
		})
	}
}

// Without reaction handlers the endpoint answers enabled false and the
// overview has no reactions section.
func TestReactionsEndpointWhenOff(t *testing.T) {
	s := newServer(t, memory.New())
	var v adminsvc.ReactionsView
	s.ok("GET", "/api/reactions", &v)
	if v.Enabled || v.Stats != nil || len(v.Items) != 0 {
		t.Fatalf("reactions off: %+v", v)
	}
	s.wantError("GET", "/api/reactions?state=lost", http.StatusBadRequest, "admin.invalid_argument")
	s.wantError("POST", "/api/reactions/1/redrive", http.StatusConflict, "admin.feature_off")
	var o adminsvc.Overview
	s.ok("GET", "/api/overview", &o)
	for _, sec := range o.Sections {
		if sec.Name == "reactions" || sec.Name == "blobs" {
			t.Fatalf("section %q without the feature", sec.Name)
		}
	}
}

// outageResolver answers like AllowAll until its outage is switched on,
// then reports an outage (rounds are authorized by the auth lease).
type outageResolver struct {
	base engine.ScopeResolver
	mu   sync.Mutex
	on   bool
}

func (r *outageResolver) ResolveScopes(ctx context.Context, id engine.Identity) (map[string][]string, error) {
	r.mu.Lock()
	on := r.on
	r.mu.Unlock()
	if on {
		return nil, fmt.Errorf("identity provider unreachable: %w", engine.ErrResolverOutage)
	}
	return r.base.ResolveScopes(ctx, id)
}

func (r *outageResolver) set(on bool) {
	r.mu.Lock()
	r.on = on
	r.mu.Unlock()
}

// The client detail shows the client's lease; revoke-lease revokes it (the
// detail then shows when), after which a round during a resolver outage
// answers sync.auth_lease_revoked; a client without a lease is a 404, an
// engine without leases a 409, both in words.
func TestRevokeLeaseEndpoint(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			res := &outageResolver{}
			s := newServerWith(t, b.open(t), func(c *engine.Config) {
				res.base = c.Resolver
				c.Resolver = res
				c.Leases.TTL, c.Leases.Key = time.Hour, []byte("0123456789abcdef0123456789abcdef")
			})
			s.push("p1", "ada", "c1", "cc1", "t1", "P", "first")

			var before adminsvc.ClientView
			s.ok("GET", "/api/partitions/p1/clients/c1", &before)
			l := before.Lease
			now := time.Now().UnixMilli()
			if l == nil || l.LeaseID == "" || l.Actor != "ada" || l.RevokedAtMs != 0 || l.ExpiresAtMs < now+30*60*1000 ||
				!strings.Contains(string(l.AllowedScopes), "project") {
				t.Fatalf("lease before revocation: %+v", l)
			}

			var out map[string]string
			s.ok("POST", "/api/partitions/p1/clients/c1/revoke-lease", &out)
			if out["leaseId"] != l.LeaseID || out["clientId"] != "c1" {
				t.Fatalf("revoke answered %v, want lease %s", out, l.LeaseID)
			}
			var after adminsvc.ClientView
			s.ok("GET", "/api/partitions/p1/clients/c1", &after)
			if after.Lease == nil || after.Lease.LeaseID != l.LeaseID || after.Lease.RevokedAtMs == 0 {
				t.Fatalf("lease after revocation: %+v", after.Lease)
			}
			found := false
			for _, e := range s.ring.Recent(0, 0) {
				found = found || (e.Kind == adminsvc.LeaseRevoked && strings.Contains(e.Message, l.LeaseID))
			}
			if !found {
				t.Fatal("no lease.revoked event")
			}

			res.set(true)
			op := ssp2.Operation{Table: "tasks", RowID: "t2", Op: ssp2.OpDelete}
			_, err := s.client("p1", "ada", "c1").Push(context.Background(), &ssp2.PushCommit{ClientCommitID: "cc2", Operations: []ssp2.Operation{op}})
			var se *syncerr.Error
			if !errors.As(err, &se) || se.Code != syncerr.AuthLeaseRevoked {
				t.Fatalf("round after revocation during an outage: %v, want %s", err, syncerr.AuthLeaseRevoked)
			}
			res.set(false)

			s.wantError("POST", "/api/partitions/p1/clients/nobody/revoke-lease", http.StatusNotFound, "admin.not_found")
		})
	}
	off := newServer(t, memory.New())
	off.push("p1", "ada", "c1", "cc1", "t1", "P", "first")
	off.wantError("POST", "/api/partitions/p1/clients/c1/revoke-lease", http.StatusConflict, "admin.feature_off")
	var c adminsvc.ClientView
	off.ok("GET", "/api/partitions/p1/clients/c1", &c)
	if c.Lease != nil {
		t.Fatalf("lease shown with leases off: %+v", c.Lease)
	}
}

// With a blob store the overview has a "blobs" section whose counters
// follow uploads.
func TestBlobSection(t *testing.T) {
	dir := t.TempDir()
	s := newServerWith(t, memory.New(), func(c *engine.Config) {
		fs, err := blobstore.NewFS(dir)
		if err != nil {
			t.Fatal(err)
		}
		c.Blobs = blobs.Options{Store: fs, MaxBytes: 1 << 20}
	})
	body := []byte("a blob of eighteen")
	if err := s.eng.Blobs().Upload(context.Background(), blobstore.IDOf(body), "text/plain", int64(len(body)), 0, bytes.NewReader(body)); err != nil {
		t.Fatal(err)
	}
	var o struct {
		Sections []struct {
			Name  string
			Stats struct {
				MaxBlobBytes int64
				Counters     blobs.Stats
				Stored       storage.BlobCounts
			}
		}
	}
	s.ok("GET", "/api/overview", &o)
	for _, sec := range o.Sections {
		if sec.Name == "blobs" {
			if sec.Stats.MaxBlobBytes != 1<<20 || sec.Stats.Counters.Uploads != 1 || sec.Stats.Counters.BytesIn != uint64(len(body)) ||
				sec.Stats.Stored != (storage.BlobCounts{Present: 1, PresentBytes: int64(len(body))}) {
				t.Fatalf("blobs section %+v", sec.Stats)
			}
			return
		}
	}
	t.Fatalf("no blobs section in %+v", o.Sections)
}

// With registered remote operations the overview has an "operations"
// section naming them, with the operation counters.
func TestOperationSection(t *testing.T) {
	// SQLite: registered queries need a backend with the Queries role.
	s := newServerWith(t, backends[1].open(t), func(c *engine.Config) {
		reg := operations.NewRegistry(c.Schema)
		if err := reg.AddQuery(operations.Query{ID: "tasksOfProject", SQL: "SELECT id, title FROM {tasks} ORDER BY id", MaxRows: 10,
			Columns:  []operations.Column{{Name: "id", Type: ssp2.TypeString}, {Name: "title", Type: ssp2.TypeString}},
			Coverage: []operations.Coverage{{Table: "tasks", Params: map[string]string{"project_id": "project"}}}}); err != nil {
			t.Fatal(err)
		}
		for _, id := range []string{"closeTask", "archive"} {
			if err := reg.AddCommand(operations.Command{ID: id,
				Authorize: func(context.Context, operations.Caller, any) (bool, error) { return false, nil },
				Run:       func(context.Context, operations.Invocation) ([]operations.Mutation, error) { return nil, nil }}); err != nil {
				t.Fatal(err)
			}
		}
		c.Operations.Registry = reg
	})
	id := engine.Identity{ActorID: "ada", Partition: "p1"}
	_, err := s.eng.Operations().Run(context.Background(), id, &opwire.Request{Kind: opwire.KindCommand, ClientID: "c1", OperationID: "archive", RequestID: "r1"})
	if syncerr.CodeOf(err) != syncerr.OperationForbidden {
		t.Fatalf("refused command: %v", err)
	}
	var o struct {
		Sections []struct {
			Name  string
			Stats struct {
				Registered operations.Registered
				Refused    map[string]map[string]uint64
			}
		}
	}
	s.ok("GET", "/api/overview", &o)
	for _, sec := range o.Sections {
		if sec.Name == "operations" {
			r := sec.Stats.Registered
			if fmt.Sprint(r.Queries) != "[tasksOfProject]" || fmt.Sprint(r.Commands) != "[archive closeTask]" ||
				sec.Stats.Refused["command"]["operation.forbidden"] != 1 {
				t.Fatalf("operations section %+v", sec.Stats)
			}
			return
		}
	}
	t.Fatalf("no operations section in %+v", o.Sections)
}

// The row inspector lists the blobs a row's blob_ref columns name, with
// their metadata and the partition's rows referencing each; a row without
// blobs has none.
func TestRowBlobs(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			fileSchema, err := schema.Parse([]byte(`{"version":1,"tables":[{"name":"files","columns":[
				{"name":"id","type":"string"},{"name":"project_id","type":"string"},
				{"name":"file","type":"blob_ref","nullable":true}],"primaryKey":"id","scopes":["project:{project_id}"]}]}`))
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			s := newServerWith(t, b.open(t), func(c *engine.Config) {
				fs, err := blobstore.NewFS(dir)
				if err != nil {
					t.Fatal(err)
				}
				c.Schema, c.Resolver, c.Blobs = fileSchema, engine.AllowAll(fileSchema), blobs.Options{Store: fs}
			})
			body := []byte("report bytes")
			id := blobstore.IDOf(body)
			if err := s.eng.Blobs().Upload(context.Background(), id, "application/pdf", int64(len(body)), 0, bytes.NewReader(body)); err != nil {
				t.Fatal(err)
			}
			codec := ssp2.NewRowCodec(fileSchema.Table("files").Columns)
			ref := fmt.Sprintf(`{"blobId":%q,"byteLength":%d}`, id, len(body))
			for i, row := range []ssp2.Row{{"f1", "P", ref}, {"f2", "P", ref}, {"f3", "P", nil}} {
				payload, err := codec.AppendSparse(nil, row, nil, 0)
				if err != nil {
					t.Fatal(err)
				}
				res, err := s.client("p1", "ada", "c1").Push(context.Background(), &ssp2.PushCommit{ClientCommitID: fmt.Sprint("c", i),
					Operations: []ssp2.Operation{{Table: "files", RowID: row[0].(string), Op: ssp2.OpUpsert, Payload: payload}}})
				if err != nil || res[0].Status != ssp2.CommitApplied {
					t.Fatalf("push %v: %v %+v", row[0], err, res)
				}
			}
			var d adminsvc.RowDetail
			s.ok("GET", "/api/partitions/p1/rows/files/f1", &d)
			if len(d.Blobs) != 1 {
				t.Fatalf("blobs of f1: %+v", d.Blobs)
			}
			bv := d.Blobs[0]
			if bv.Column != "file" || bv.BlobID != id || bv.State != "present" || bv.ByteLength != int64(len(body)) || bv.MediaType != "application/pdf" ||
				!slices.Equal(bv.Rows, []adminsvc.RowRef{{Table: "files", RowID: "f1"}, {Table: "files", RowID: "f2"}}) {
				t.Fatalf("blob of f1: %+v", bv)
			}
			var none adminsvc.RowDetail
			s.ok("GET", "/api/partitions/p1/rows/files/f3", &none)
			if !none.Exists || none.Blobs != nil {
				t.Fatalf("blobs of a row without one: %+v", none.Blobs)
			}
		})
	}
}
