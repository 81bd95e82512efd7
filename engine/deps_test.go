package engine_test

import (
	"errors"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// heavyDeps are the import-path prefixes of database drivers, cloud SDKs
// and the etcd client. The engine, the partition, the storage interfaces
// and the memory backend link none of them: a binary links a driver by
// configuring the backend package that holds it (storage/sqlite,
// storage/postgres, storage/segstore/..., storage/blobstore/...), and etcd
// through the cluster membership on it (engine/cluster/etcdmembers), so an
// embedder using storage/memory pulls in none.
var heavyDeps = []string{
	"github.com/jackc/pgx",           // PostgreSQL
	"github.com/jackc/pgconn",        // PostgreSQL (pgx v4)
	"github.com/lib/pq",              // PostgreSQL
	"modernc.org/sqlite",             // SQLite
	"modernc.org/libc",               // SQLite's C runtime
	"github.com/mattn/go-sqlite3",    // SQLite (cgo)
	"github.com/ncruces/go-sqlite3",  // SQLite (wasm)
	"github.com/go-sql-driver/mysql", // MySQL
	"github.com/minio",               // S3 (minio-go)
	"github.com/aws/",                // AWS SDKs
	"cloud.google.com/",              // Google Cloud SDKs
	"github.com/Azure/",              // Azure SDKs
	"gocloud.dev",                    // Go CDK (every cloud)
	"go.etcd.io/",                    // etcd client (cluster membership: engine/cluster/etcdmembers)
}

// listDeps runs go list -deps on pkgs from the module root and returns
// every import path it names.
func listDeps(t *testing.T, pkgs ...string) []string {
	t.Helper()
	return strings.Fields(goList(t, append([]string{"-deps", "-f", "{{.ImportPath}}"}, pkgs...)...))
}

// goList runs go list with args from the module root and returns its
// output.
func goList(t *testing.T, args ...string) string {
	t.Helper()
	gomod, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("go env GOMOD: %v", err)
	}
	root := filepath.Dir(strings.TrimSpace(string(gomod)))
	cmd := exec.Command("go", append([]string{"list"}, args...)...)
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		var stderr []byte
		if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
			stderr = ee.Stderr
		}
		t.Fatalf("go list %v: %v\n%s", args, err, stderr)
	}
	return string(out)
}

// heavy returns the paths of deps under a heavyDeps prefix.
func heavy(deps []string) []string {
	var found []string
	for _, d := range deps {
		if slices.ContainsFunc(heavyDeps, func(p string) bool { return strings.HasPrefix(d, p) }) {
			found = append(found, d)
		}
	}
	return found
}

// TestCoreLinksNoDriver: the engine, the partition, the storage
// interfaces, the memory backend and the cluster placement (engine/cluster)
// link no database driver, no cloud SDK and no etcd client (dependencies
// point inward).
func TestCoreLinksNoDriver(t *testing.T) {
	if found := heavy(listDeps(t, "./engine", "./partition", "./storage", "./storage/memory", "./engine/cluster")); len(found) > 0 {
		t.Fatalf("the core links drivers or cloud SDKs:\n%s", strings.Join(found, "\n"))
	}
}

// TestServerLinksEveryDriver: the server binary offers every backend, so
// it links their drivers (and the check above would see them).
func TestServerLinksEveryDriver(t *testing.T) {
	found := heavy(listDeps(t, "./cmd/synclane"))
	for _, want := range []string{"github.com/jackc/pgx/v5", "modernc.org/sqlite", "github.com/minio/minio-go/v7"} {
		if !slices.Contains(found, want) {
			t.Errorf("cmd/synclane does not link %s (found %v)", want, found)
		}
	}
}
