// Command v2fixture writes the databases of storage/storagetest/legacydb's
// testdata with this tree's code (branch main, before column versions and
// tombstones): it runs `synclane serve` (the binary given) on a SQLite
// data directory or a PostgreSQL schema, pushes a fixed script of commits
// through the HTTP client, stops it with SIGTERM, and (PostgreSQL) takes a
// test-control capture of one partition with the store directly.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"net/http"
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/synclane/synclane/protocol/schema"
	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/storage/postgres"
	"github.com/synclane/synclane/transport/httpsync"
)

var codec = ssp2.NewRowCodec(schema.MustDemo().Table("todos").Columns)

func row(id, title string, done bool, pos int64) []byte {
	b, err := codec.Append(nil, ssp2.Row{id, "L1", title, done, pos, int64(1_700_000_000_000) + pos})
	if err != nil {
		log.Fatal(err)
	}
	return b
}

func up(id, title string, base *int64, pos int64) ssp2.Operation {
	return ssp2.Operation{Table: "todos", RowID: id, Op: ssp2.OpUpsert, BaseVersion: base, Payload: row(id, title, false, pos)}
}

func v(n int64) *int64 { return &n }

func main() {
	bin := flag.String("bin", "", "the synclane binary built from this tree")
	data := flag.String("data", "", "SQLite data directory to create")
	pg := flag.String("postgres", "", "PostgreSQL URL (its search_path names the fixture schema)")
	pgSchema := flag.String("schema", "", "the fixture schema (PostgreSQL)")
	flag.Parse()
	args := []string{"serve", "--listen", "127.0.0.1:0", "--log-level", "warn"}
	if *pg != "" {
		args = append(args, "--postgres", *pg, "--lease-key", "0123456789abcdef0123456789abcdef-fixture")
	} else {
		args = append(args, "--data", *data)
	}
	cmd := exec.Command(*bin, args...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		log.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		log.Fatal(err)
	}
	sc := bufio.NewScanner(out)
	if !sc.Scan() {
		log.Fatal("serve printed nothing")
	}
	var first struct {
		Listening string `json:"listening"`
	}
	if err := json.Unmarshal(sc.Bytes(), &first); err != nil || first.Listening == "" {
		log.Fatalf("first line %q: %v", sc.Text(), err)
	}
	go func() {
		for sc.Scan() {
		}
	}()
	ctx := context.Background()
	for _, part := range []string{"default", "acme"} {
		c := &httpsync.Client{URL: first.Listening + "/sync", ClientID: "writer-" + part,
			Header: http.Header{"X-Actor": {"ada"}, "X-Partition": {part}}}
		script := []*ssp2.PushCommit{
			{ClientCommitID: "c1", Operations: []ssp2.Operation{up("t1", "t1 v1", nil, 1), up("t2", "t2 v1", nil, 2), up("t3", "t3 v1", nil, 3)}},
			{ClientCommitID: "c2", Operations: []ssp2.Operation{up("t1", "t1 v2", v(1), 1)}},
			{ClientCommitID: "c3", Operations: []ssp2.Operation{up("t1", "t1 v3", v(2), 1), up("t4", "t4 v1", nil, 4)}},
			{ClientCommitID: "c4", Operations: []ssp2.Operation{{Table: "todos", RowID: "t3", Op: ssp2.OpDelete}}},
			{ClientCommitID: "c5", Operations: []ssp2.Operation{up("t4", "t4 v2", v(1), 4)}},
		}
		for _, cm := range script {
			rs, err := c.Push(ctx, cm)
			if err != nil || len(rs) != 1 || rs[0].Status != ssp2.CommitApplied {
				log.Fatalf("%s %s: %+v %v", part, cm.ClientCommitID, rs, err)
			}
			fmt.Printf("%s %s applied at seq %d\n", part, cm.ClientCommitID, *rs[0].CommitSeq)
		}
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		log.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			log.Fatalf("serve: %v", err)
		}
	case <-time.After(30 * time.Second):
		log.Fatal("serve did not stop")
	}
	if *pg != "" {
		s, err := postgres.Open(ctx, *pg, postgres.Options{Schema: *pgSchema, MaxConns: 2})
		if err != nil {
			log.Fatal(err)
		}
		defer s.Close()
		if err := s.EnsureSchema(ctx, schema.MustDemo()); err != nil {
			log.Fatal(err)
		}
		if err := s.CapturePartition(ctx, "default"); err != nil {
			log.Fatal(err)
		}
		fmt.Println("captured default")
	}
}
