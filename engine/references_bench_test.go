package engine_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage"
	"github.com/synclane/synclane/storage/memory"
	"github.com/synclane/synclane/storage/sqlite"
)

// Declared references' cost (bench/RESULTS.md, "Declared references").
//
//	go test -run='^$' -bench='PushReferences|Cascade1000' -benchtime=3s -count=5 ./engine/

// benchStores are the stores the reference benchmarks run on.
func benchStores(b *testing.B) map[string]func(*testing.B) storage.Backend {
	return map[string]func(*testing.B) storage.Backend{
		"memory": func(*testing.B) storage.Backend { return memory.New().Backend() },
		"sqlite": func(b *testing.B) storage.Backend {
			st, err := sqlite.Open(context.Background(), filepath.Join(b.TempDir(), "s.db"), sqlite.Options{})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { st.Close() })
			return st.Backend()
		},
	}
}

// benchEngine starts an engine on refSchemaJSON (refs) or the same tables
// without references, and acquires the partition's epoch.
func benchEngine(b *testing.B, be storage.Backend, refs bool) (*engine.Engine, *schema.Schema, string) {
	b.Helper()
	src := refSchemaJSON
	if !refs {
		sch, err := schema.Parse([]byte(refSchemaJSON))
		if err != nil {
			b.Fatal(err)
		}
		plain := sch.Source()
		for i := range plain.Tables {
			plain.Tables[i].References = nil
		}
		s, err := schema.Compile(plain)
		if err != nil {
			b.Fatal(err)
		}
		return startBenchEngine(b, be, s)
	}
	s, err := schema.Parse([]byte(src))
	if err != nil {
		b.Fatal(err)
	}
	return startBenchEngine(b, be, s)
}

func startBenchEngine(b *testing.B, be storage.Backend, s *schema.Schema) (*engine.Engine, *schema.Schema, string) {
	b.Helper()
	eng, err := engine.New(context.Background(), engine.Config{Schema: s, Backend: be, Resolver: engine.AllowAll(s)})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { eng.Close() })
	rep, err := eng.Sync(context.Background(), benchID, &ssp2.Message{WireVersion: ssp2.WireV3, Kind: ssp2.KindRequest, Frames: []ssp2.Frame{
		&ssp2.ReqHeader{ClientID: "c", SchemaVersion: s.Version}, &ssp2.PullHeader{Accept: 1}}})
	if err != nil {
		b.Fatal(err)
	}
	return eng, s, rep.Header().LogEpoch
}

var benchID = engine.Identity{ActorID: "u", Partition: "p"}

// benchPush pushes one commit of ops and fails on anything but applied.
func benchPush(b *testing.B, eng *engine.Engine, epoch, ccid string, ops ...ssp2.Operation) {
	rep, err := eng.Sync(context.Background(), benchID, &ssp2.Message{WireVersion: ssp2.WireV3, Kind: ssp2.KindRequest, Frames: []ssp2.Frame{
		&ssp2.ReqHeader{ClientID: "c", SchemaVersion: 1, LogEpoch: &epoch},
		&ssp2.PushCommit{ClientCommitID: ccid, Operations: ops}}})
	if err != nil || rep.Applied != 1 {
		b.Fatalf("push %s: %v %+v", ccid, err, rep)
	}
}

func benchRow(b *testing.B, s *schema.Schema, table string, values ...any) ssp2.Operation {
	row := append(ssp2.Row{values[0], "P"}, values[1:]...)
	p, err := ssp2.NewRowCodec(s.Table(table).Columns).AppendSparse(nil, row, nil, 0)
	if err != nil {
		b.Fatal(err)
	}
	return ssp2.Operation{Table: table, RowID: values[0].(string), Op: ssp2.OpUpsert, Payload: p}
}

// BenchmarkPushReferences: one-upsert commits to lists (a parent table
// that declares no reference of its own: an upsert of it checks nothing),
// in a schema with and without references: what commits that touch no
// reference column pay for the rules.
func BenchmarkPushReferences(b *testing.B) {
	for name, open := range benchStores(b) {
		for _, refs := range []bool{false, true} {
			b.Run(fmt.Sprintf("%s/refs=%v", name, refs), func(b *testing.B) {
				eng, s, epoch := benchEngine(b, open(b), refs)
				for i := 0; b.Loop(); i++ {
					id := "n" + strconv.Itoa(i%50)
					benchPush(b, eng, epoch, "k"+strconv.Itoa(i), benchRow(b, s, "lists", id, "title "+strconv.Itoa(i)))
				}
			})
		}
	}
}

// BenchmarkCascade1000: deleting a list with 1,000 todos (one CASCADE of
// 1,000 appended deletes, the default cap): the latency of that commit,
// during which the partition's other pushes wait (its write lock).
func BenchmarkCascade1000(b *testing.B) {
	for name, open := range benchStores(b) {
		b.Run(name, func(b *testing.B) {
			eng, s, epoch := benchEngine(b, open(b), true)
			var total time.Duration
			for i := 0; b.Loop(); i++ {
				b.StopTimer()
				list := "L" + strconv.Itoa(i)
				ops := []ssp2.Operation{benchRow(b, s, "lists", list, "big")}
				for k := range 1000 {
					ops = append(ops, benchRow(b, s, "todos", list+"-t"+strconv.Itoa(k), list, "x"))
					if len(ops) == 400 {
						benchPush(b, eng, epoch, list+"-fill-"+strconv.Itoa(k), ops...)
						ops = ops[:0]
					}
				}
				if len(ops) > 0 {
					benchPush(b, eng, epoch, list+"-fill-end", ops...)
				}
				b.StartTimer()
				start := time.Now()
				benchPush(b, eng, epoch, list+"-drop", ssp2.Operation{Table: "lists", RowID: list, Op: ssp2.OpDelete})
				total += time.Since(start)
			}
			b.ReportMetric(float64(total.Microseconds())/float64(b.N)/1000, "ms/cascade")
		})
	}
}
