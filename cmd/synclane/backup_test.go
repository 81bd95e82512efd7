package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/synclane/synclane/protocol/ssp2"
	"github.com/synclane/synclane/protocol/syncerr"
	"github.com/synclane/synclane/storage/blobstore"
	"github.com/synclane/synclane/transport/httpsync"
)

// runBinary runs the synclane binary (a real process) and returns its exit
// code and combined output.
func runBinary(t *testing.T, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, synclaneBinary(t), args...).CombinedOutput()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), string(out)
	}
	if err != nil {
		t.Fatalf("%v: %v", args, err)
	}
	return 0, string(out)
}

// snapshotDir returns every regular file under dir with its bytes (the
// data-directory lock file left out).
func snapshotDir(t *testing.T, dir string) map[string]string {
	t.Helper()
	files := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		if d.Name() == "synclane.lock" {
			return nil // the data-directory lock restore takes (and releases): not data
		}
		b, err := os.ReadFile(p)
		files[strings.TrimPrefix(p, dir)] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// copyTree copies the backup directory from to to.
func copyTree(t *testing.T, from, to string) {
	t.Helper()
	err := filepath.WalkDir(from, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(from, p)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(to, rel), 0o700)
		}
		return copyFile(p, filepath.Join(to, rel))
	})
	if err != nil {
		t.Fatal(err)
	}
}

// flipByte flips one bit of the byte in the middle of the file.
func flipByte(t *testing.T, p string) {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0x01
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// A backup of a server under push load, restored into a fresh directory
// and served: every row acknowledged before the backup started is there,
// blobs uploaded before it download with the same bytes, a lease issued
// before it still authorizes an outage round; backup files are 0600 in
// 0700 directories; a backup with one byte flipped (in the database or a
// blob) is refused before the target is touched.
func TestBackupRestoreUnderLoad(t *testing.T) {
	dir := t.TempDir()
	sf := filepath.Join(t.TempDir(), "schema.json")
	if err := os.WriteFile(sf, []byte(allTypesSchema), 0o600); err != nil {
		t.Fatal(err)
	}
	flags := []string{"--schema", sf, "--test-control", "--clock-ms", "1800000000000", "--lease-ttl", "15m"}
	p := startProc(t, append([]string{"--data", dir, "--sqlite-files", "4"}, flags...)...)
	if code := control(t, "PUT", p.base+"/_test/allowed-scopes/ada", `{"project_id":["p1"]}`, nil); code != http.StatusOK {
		t.Fatalf("allowed-scopes: %d", code)
	}
	ctx := context.Background()

	// A lease issued before the backup.
	lc := newThingsClient(p.base, "ada", "c-lease")
	if err := lc.Handshake(ctx); err != nil {
		t.Fatal(err)
	}
	m, err := leaseRound(t, lc, "lease-row", "lc1")
	if err != nil {
		t.Fatal(err)
	}
	if l := leaseFrame(t, m); l == nil {
		t.Fatal("no LEASE frame before the backup")
	}

	// Blobs uploaded (and referenced) before the backup.
	blobs := map[string][]byte{}
	for i := range 3 {
		data := make([]byte, 100_000+i)
		if _, err := rand.Read(data); err != nil {
			t.Fatal(err)
		}
		id := blobstore.IDOf(data)
		if err := lc.UploadBlob(ctx, id, "application/octet-stream", bytes.NewReader(data), int64(len(data))); err != nil {
			t.Fatalf("upload blob %d: %v", i, err)
		}
		ref := fmt.Sprintf(`{"blobId":%q,"byteLength":%d}`, id, len(data))
		if pr := pushRow(t, lc, ssp2.Row{fmt.Sprint("blob-row-", i), "p1", nil, nil, nil, nil, nil, ref, nil}, fmt.Sprint("bc", i)); pr.Status != ssp2.CommitApplied {
			t.Fatalf("push blob row %d: %+v", i, pr)
		}
		blobs[id] = data
	}

	// Writers pushing while the backup runs.
	var mu sync.Mutex
	acked := map[string]bool{"lease-row": true, "blob-row-0": true, "blob-row-1": true, "blob-row-2": true}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, 3)
	for w := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := newThingsClient(p.base, "ada", fmt.Sprint("writer-", w))
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				id := fmt.Sprintf("w%d-%d", w, n)
				payload, err := thingsCodec.AppendSparse(nil, ssp2.Row{id, "p1", int64(n), nil, nil, nil, nil, nil, nil}, nil, 0)
				if err == nil {
					var rs []*ssp2.PushResult
					rs, err = c.Push(ctx, &ssp2.PushCommit{ClientCommitID: id, Operations: []ssp2.Operation{{Table: "things", RowID: id, Op: ssp2.OpUpsert, Payload: payload}}})
					if err == nil && rs[0].Status != ssp2.CommitApplied {
						err = fmt.Errorf("push %s: %+v", id, rs[0])
					}
				}
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				acked[id] = true
				mu.Unlock()
			}
		}()
	}
	stopWriters := func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		wg.Wait()
		select {
		case err := <-errs:
			t.Fatalf("writer: %v", err)
		default:
		}
	}
	defer stopWriters()
	countAcked := func() int { mu.Lock(); defer mu.Unlock(); return len(acked) }
	for deadline := time.Now().Add(30 * time.Second); countAcked() < 4+60; {
		if time.Now().After(deadline) {
			t.Fatalf("writers acknowledged only %d rows in 30s", countAcked())
		}
		time.Sleep(10 * time.Millisecond)
	}
	mu.Lock()
	before := make([]string, 0, len(acked))
	for id := range acked {
		before = append(before, id)
	}
	mu.Unlock()

	bdir := filepath.Join(t.TempDir(), "backup")
	code, out := runBinary(t, "backup", "--data", dir, "--to", bdir)
	if code != 0 || !strings.Contains(out, "backed up") || !strings.Contains(out, "(3 blobs)") || !strings.Contains(out, "segments are a cache") {
		t.Fatalf("backup under load: exit %d\n%s", code, out)
	}
	during := countAcked()
	stopWriters()
	if during <= len(before) {
		t.Fatalf("no push was acknowledged while the backup ran (%d before, %d after): not a backup under load", len(before), during)
	}
	t.Logf("%d rows acknowledged before the backup, %d by its end\n%s", len(before), during, out)

	// Modes: the directory and every directory in it 0700, every file 0600.
	nfiles := 0
	err = filepath.WalkDir(bdir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		want := fs.FileMode(0o600)
		if d.IsDir() {
			want = 0o700
		} else {
			nfiles++
		}
		if fi.Mode().Perm() != want {
			t.Errorf("%s: mode %v, want %v", p, fi.Mode().Perm(), want)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var man backupManifest
	if b, err := os.ReadFile(filepath.Join(bdir, "manifest.json")); err != nil || json.Unmarshal(b, &man) != nil {
		t.Fatalf("manifest: %v", err)
	}
	listed := map[string]bool{}
	for _, f := range man.Files {
		listed[f.Path] = true
	}
	for id := range blobs {
		h, _ := blobstore.ParseID(id)
		if !listed["blobs/"+h[:2]+"/"+h] {
			t.Errorf("blob %s not in the manifest", id)
		}
	}
	// The directory was made with --sqlite-files 4.
	if !listed["synclane.db"] || !listed["synclane-3.db"] || !listed["lease.key"] || len(man.Files) != 8 || nfiles != 9 || man.FormatVersion != 2 || man.SchemaVersion != "1" || man.DatabaseFiles != 4 {
		t.Fatalf("manifest %+v (%d files in the directory), want synclane.db to synclane-3.db, lease.key, 3 blobs", man, nfiles)
	}
	key, err := os.ReadFile(filepath.Join(dir, "lease.key"))
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(bdir, "lease.key")); !bytes.Equal(b, key) {
		t.Fatal("the backup's lease.key differs from the data directory's")
	}

	// One byte flipped in the database or in a blob: refused, naming the
	// file, the target untouched.
	var someBlob string
	for f := range listed {
		if strings.HasPrefix(f, "blobs/") {
			someBlob = f
		}
	}
	for _, corrupt := range []string{"synclane.db", "synclane-2.db", someBlob} {
		bad := filepath.Join(t.TempDir(), "bad")
		copyTree(t, bdir, bad)
		flipByte(t, filepath.Join(bad, filepath.FromSlash(corrupt)))
		target := t.TempDir()
		if err := os.WriteFile(filepath.Join(target, "synclane.db"), []byte("the operator's current database"), 0o600); err != nil {
			t.Fatal(err)
		}
		was := snapshotDir(t, target)
		code, out := runBinary(t, "restore", "--data", target, "--schema", sf, "--from", bad)
		if code == 0 || !strings.Contains(out, "backup file "+corrupt+" is corrupted") {
			t.Fatalf("restore of a backup with %s corrupted: exit %d\n%s", corrupt, code, out)
		}
		if now := snapshotDir(t, target); fmt.Sprint(now) != fmt.Sprint(was) {
			t.Fatalf("a refused restore changed the target: %v, was %v", now, was)
		}
	}

	// Blobs with nowhere local to go: refused before the target is touched.
	target := t.TempDir()
	if code, out := runBinary(t, "restore", "--data", target, "--schema", sf, "--from", bdir, "--blob-store", "off"); code == 0 || !strings.Contains(out, "nothing in") {
		t.Fatalf("restore of blobs with --blob-store off: exit %d\n%s", code, out)
	}
	if got := snapshotDir(t, target); len(got) != 0 {
		t.Fatalf("a refused restore wrote %v", got)
	}

	// Restore into a fresh directory holding a stale segment cache.
	p.kill(t)
	dir2 := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir2, "segments.db"), []byte("stale segments"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out = runBinary(t, "restore", "--data", dir2, "--schema", sf, "--from", bdir)
	if code != 0 || !strings.Contains(out, "verified") || !strings.Contains(out, "restored 3 blobs") || !strings.Contains(out, "rebuilt on demand") {
		t.Fatalf("restore: exit %d\n%s", code, out)
	}
	if b, err := os.ReadFile(filepath.Join(dir2, "segments.db")); err == nil && string(b) == "stale segments" {
		t.Fatal("the stale segments.db is still in place after the restore")
	}
	if aside, _ := filepath.Glob(filepath.Join(dir2, "*.before-restore-*")); len(aside) != 0 {
		t.Fatalf("the replaced files are left after a successful restore: %v", aside)
	}
	if fi, err := os.Stat(filepath.Join(dir2, "lease.key")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("restored lease.key: %v %v", fi, err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir2, "lease.key")); !bytes.Equal(b, key) {
		t.Fatal("the restored lease.key is not byte-identical")
	}

	p2 := startProc(t, append([]string{"--data", dir2}, flags...)...)
	control(t, "PUT", p2.base+"/_test/allowed-scopes/ada", `{"project_id":["p1"]}`, nil)
	have := map[string]bool{}
	for _, id := range thingIDs(t, p2.base) {
		have[id] = true
	}
	missing := 0
	for _, id := range before {
		if !have[id] {
			missing++
		}
	}
	for id := range have {
		if !acked[id] { // the writers have stopped: every commit was answered
			t.Errorf("restored row %s was never acknowledged", id)
		}
	}
	if missing > 0 {
		t.Fatalf("restored %d rows: %d of the %d acknowledged before the backup missing", len(have), missing, len(before))
	}
	dc := newThingsClient(p2.base, "ada", "c-reader")
	for id, data := range blobs {
		var buf bytes.Buffer
		if _, err := dc.DownloadBlob(ctx, id, &buf); err != nil || !bytes.Equal(buf.Bytes(), data) {
			t.Fatalf("blob %s after the restore: %v, %d bytes, want %d", id, err, buf.Len(), len(data))
		}
	}

	// The pre-backup lease authorizes an outage round on the restored
	// server (same lease key, same clock).
	if code := control(t, "POST", p2.base+"/_test/resolver", `{"outage":true}`, nil); code != http.StatusOK {
		t.Fatalf("outage on: %d", code)
	}
	lc2 := &httpsync.Client{URL: p2.base + "/sync", ClientID: "c-lease", Header: lc.Header}
	if err := lc2.Handshake(ctx); err != nil { // the restore rotated the epoch
		t.Fatal(err)
	}
	if _, err := leaseRound(t, lc2, "outage-row", "lc2"); err != nil {
		t.Fatalf("an outage round on a pre-backup lease after the restore: %v", err)
	}

	// The control: the same restore without its lease.key (a new key is
	// generated) refuses that outage round, so the check above is the key's.
	dir3 := t.TempDir()
	if code, out := runBinary(t, "restore", "--data", dir3, "--schema", sf, "--from", bdir); code != 0 {
		t.Fatalf("restore: exit %d\n%s", code, out)
	}
	if err := os.Remove(filepath.Join(dir3, "lease.key")); err != nil {
		t.Fatal(err)
	}
	p3 := startProc(t, append([]string{"--data", dir3}, flags...)...)
	control(t, "PUT", p3.base+"/_test/allowed-scopes/ada", `{"project_id":["p1"]}`, nil)
	control(t, "POST", p3.base+"/_test/resolver", `{"outage":true}`, nil)
	lc3 := &httpsync.Client{URL: p3.base + "/sync", ClientID: "c-lease", Header: lc.Header}
	if err := lc3.Handshake(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := leaseRound(t, lc3, "outage-row", "lc2"); err == nil || syncerr.As(err) == nil || syncerr.As(err).Spec().HTTPStatus != http.StatusUnauthorized {
		t.Fatalf("an outage round without the backed-up lease key: %v, want a 401 lease code", err)
	}
}

// verifyBackup refuses a manifest that is missing, of another format,
// without the database, or naming a path a backup does not hold (so a
// manifest cannot make restore write outside the data directory).
func TestVerifyBackupRefusesBadManifests(t *testing.T) {
	db := []byte("database bytes")
	good, err := json.Marshal(backupFile{Path: "synclane.db", Size: int64(len(db)), SHA256: fmt.Sprintf("%x", sha256.Sum256(db))})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, manifest, want string }{
		{"no manifest", "", "not a backup directory"},
		{"not json", "{", "manifest.json"},
		{"other format", `{"format":"tarball","formatVersion":1,"files":[` + string(good) + `]}`, "format"},
		{"newer version", `{"format":"synclane-backup","formatVersion":3,"files":[` + string(good) + `]}`, "version 3"},
		{"version 2 without databaseFiles", `{"format":"synclane-backup","formatVersion":2,"files":[` + string(good) + `]}`, "databaseFiles 0"},
		{"version 1 with databaseFiles", `{"format":"synclane-backup","formatVersion":1,"databaseFiles":2,"files":[` + string(good) + `]}`, "databaseFiles 2"},
		{"a database file missing", `{"format":"synclane-backup","formatVersion":2,"databaseFiles":2,"files":[` + string(good) + `]}`, "lists no synclane-1.db"},
		{"a database file beyond K", `{"format":"synclane-backup","formatVersion":2,"databaseFiles":1,"files":[` + string(good) + `,{"path":"synclane-1.db","size":1,"sha256":"00"}]}`, "no file of a backup"},
		{"no database", `{"format":"synclane-backup","formatVersion":1,"files":[]}`, "lists no synclane.db"},
		{"escaping path", `{"format":"synclane-backup","formatVersion":1,"files":[` + string(good) + `,{"path":"../x","size":1,"sha256":"00"}]}`, "no file of a backup"},
		{"blob outside its shard", `{"format":"synclane-backup","formatVersion":1,"files":[` + string(good) + `,{"path":"blobs/00/` + strings.Repeat("a", 64) + `","size":1,"sha256":"00"}]}`, "no file of a backup"},
		{"missing file", `{"format":"synclane-backup","formatVersion":1,"files":[` + string(good) + `,{"path":"lease.key","size":1,"sha256":"00"}]}`, "backup file lease.key"},
		{"short file", `{"format":"synclane-backup","formatVersion":1,"files":[{"path":"synclane.db","size":99,"sha256":"00"}]}`, "synclane.db is corrupted: 14 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "synclane.db"), db, 0o600); err != nil {
				t.Fatal(err)
			}
			if tc.manifest != "" {
				if err := os.WriteFile(filepath.Join(dir, "manifest.json"), []byte(tc.manifest), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := verifyBackup(dir); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("verifyBackup: %v, want an error containing %q", err, tc.want)
			}
		})
	}
	dir := t.TempDir()
	if err := errors.Join(os.WriteFile(filepath.Join(dir, "synclane.db"), db, 0o600),
		os.WriteFile(filepath.Join(dir, "manifest.json"), []byte(`{"format":"synclane-backup","formatVersion":1,"files":[`+string(good)+`]}`), 0o600)); err != nil {
		t.Fatal(err)
	}
	if _, err := verifyBackup(dir); err != nil {
		t.Fatalf("an intact version 1 backup: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "manifest.json"), []byte(`{"format":"synclane-backup","formatVersion":2,"databaseFiles":1,"files":[`+string(good)+`]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if m, err := verifyBackup(dir); err != nil || m.DatabaseFiles != 1 {
		t.Fatalf("an intact version 2 backup: %+v, %v", m, err)
	}
}
