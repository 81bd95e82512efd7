package engine_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/synclane/synclane/engine"
	"github.com/synclane/synclane/engine/lease"
	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage/sqlite"
)

// leaseBenchClient is one client of its own engine and SQLite file.
type leaseBenchClient struct {
	b      *testing.B
	eng    *engine.Engine
	epoch  *string
	cursor int64
}

func (c *leaseBenchClient) round(frames ...ssp2.Frame) *engine.Reply {
	msg := &ssp2.Message{WireVersion: ssp2.WireV3, Kind: ssp2.KindRequest,
		Frames: append([]ssp2.Frame{&ssp2.ReqHeader{ClientID: "ca", SchemaVersion: 1, LogEpoch: c.epoch}}, frames...)}
	rep, err := c.eng.Sync(context.Background(), engine.Identity{ActorID: "alice", Partition: "p1"}, msg)
	if err != nil {
		c.b.Fatal(err)
	}
	if _, err := rep.WriteTo(&writerBuf{}); err != nil {
		c.b.Fatal(err)
	}
	return rep
}

// BenchmarkLeaseRounds measures push rounds and pull rounds of one client
// on SQLite with auth leases off, on (15m TTL: a slide is written about
// once per 14s, so almost every round is served from the cache) and on
// with a 64ms TTL (a slide written on almost every round: the cost the
// granularity avoids). The three run interleaved, round by round, so the
// shared machine's drift hits them alike; it reports each mode's mean
// round time and the ratios to "off":
//
//	go test -run XXX -bench BenchmarkLeaseRounds -benchtime 3000x ./engine/
func BenchmarkLeaseRounds(b *testing.B) {
	s, err := schema.Parse([]byte(testSchemaJSON))
	if err != nil {
		b.Fatal(err)
	}
	payload, err := ssp2.NewRowCodec(s.Table("tasks").Columns).AppendSparse(nil, ssp2.Row{"t1", "P", "x", nil}, nil, 0)
	if err != nil {
		b.Fatal(err)
	}
	modes := []struct {
		name string
		ttl  time.Duration
	}{{"off", 0}, {"on", 15 * time.Minute}, {"write", 64 * time.Millisecond}}
	for _, kind := range []string{"push", "pull"} {
		b.Run(kind, func(b *testing.B) {
			ctx := context.Background()
			clients := make([]*leaseBenchClient, len(modes))
			for i, m := range modes {
				st, err := sqlite.Open(ctx, filepath.Join(b.TempDir(), "db.sqlite"), sqlite.Options{})
				if err != nil {
					b.Fatal(err)
				}
				defer st.Close()
				eng, err := engine.New(ctx, engine.Config{Schema: s, Backend: st.Backend(), Resolver: engine.AllowAll(s), Leases: lease.Options{TTL: m.ttl, Key: leaseKey}})
				if err != nil {
					b.Fatal(err)
				}
				defer eng.Close()
				c := &leaseBenchClient{b: b, eng: eng, cursor: -1}
				h := c.round(&ssp2.PullHeader{Accept: 1}).Header()
				c.epoch = &h.LogEpoch
				clients[i] = c
			}
			spent := make([]time.Duration, len(modes))
			b.ResetTimer()
			for i := range b.N {
				for m, c := range clients {
					start := time.Now()
					if kind == "push" {
						c.round(&ssp2.PushCommit{ClientCommitID: fmt.Sprint("c", i), Operations: []ssp2.Operation{upsert("tasks", "t1", payload, nil)}})
					} else {
						for _, f := range c.round(&ssp2.PullHeader{Accept: 1}, sub("s", c.cursor, "P")).Frames {
							if e, ok := f.(*ssp2.SubEnd); ok {
								c.cursor = e.NextCursor
							}
						}
					}
					spent[m] += time.Since(start)
				}
			}
			for m, mode := range modes {
				b.ReportMetric(float64(spent[m].Nanoseconds())/float64(b.N), mode.name+"-ns/round")
				if m > 0 {
					b.ReportMetric(float64(spent[m])/float64(spent[0]), mode.name+"/off")
				}
			}
		})
	}
}
