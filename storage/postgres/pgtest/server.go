package pgtest

import (
	"fmt"
	"net"
	"os"
	osexec "os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"syscall"
	"testing"
)

// Server is a throwaway PostgreSQL server a test owns: its own data
// directory in a temporary directory, its own port on 127.0.0.1, trust
// authentication for user postgres. A test may stop and start it at will
// (a real database restart); nobody else uses it.
type Server struct {
	// URL connects to the server's postgres database as user postgres.
	URL  string
	dir  string // the temporary directory: data/, the socket, the log
	port int
	bin  string // the directory holding initdb and pg_ctl
	cred *syscall.Credential
}

// serverBinDirs are where PostgreSQL's server binaries are looked for:
// $SYNCLANE_TEST_PG_BIN, then Debian's /usr/lib/postgresql/<major>/bin
// (newest first), then the directory of initdb on PATH.
func serverBinDirs() []string {
	var dirs []string
	if d := os.Getenv("SYNCLANE_TEST_PG_BIN"); d != "" {
		dirs = append(dirs, d)
	}
	found, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(found, func(i, j int) bool {
		a, _ := strconv.Atoi(filepath.Base(filepath.Dir(found[i])))
		b, _ := strconv.Atoi(filepath.Base(filepath.Dir(found[j])))
		return a > b
	})
	dirs = append(dirs, found...)
	if p, err := osexec.LookPath("initdb"); err == nil {
		dirs = append(dirs, filepath.Dir(p))
	}
	return dirs
}

// StartServer initializes and starts a throwaway server, stopped and
// deleted when t ends. It skips t when no initdb and pg_ctl are found (see
// serverBinDirs). initdb refuses to run as root: as root, the server runs
// as the system user postgres (or nobody), which owns its directory.
func StartServer(t testing.TB) *Server {
	t.Helper()
	s := &Server{}
	for _, d := range serverBinDirs() {
		if fileExists(filepath.Join(d, "initdb")) && fileExists(filepath.Join(d, "pg_ctl")) {
			s.bin = d
			break
		}
	}
	if s.bin == "" {
		t.Skip("pgtest: no initdb and pg_ctl found for the throwaway-server test: set SYNCLANE_TEST_PG_BIN to the directory holding them (e.g. /usr/lib/postgresql/17/bin), or apt-get install postgresql")
	}
	dir, err := os.MkdirTemp("", "synclane-pg-")
	if err != nil {
		t.Fatal(err)
	}
	s.dir = dir
	t.Cleanup(func() {
		_ = s.pgCtl("stop", "-m", "immediate").Run()
		_ = os.RemoveAll(dir)
	})
	if os.Geteuid() == 0 {
		s.cred = unprivileged(t)
		if err := os.Chown(dir, int(s.cred.Uid), int(s.cred.Gid)); err != nil {
			t.Fatal(err)
		}
	}
	s.port = freePort(t)
	s.URL = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", s.port)
	initdb := osexec.Command(filepath.Join(s.bin, "initdb"), "-D", s.data(), "-A", "trust", "-U", "postgres", "--no-sync", "-E", "UTF8")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	if out, err := initdb.CombinedOutput(); err != nil {
		t.Fatalf("pgtest: initdb: %v\n%s", err, out)
	}
	s.Start(t)
	return s
}

// unprivileged returns the credential of the system user postgres, or of
// nobody when there is none.
func unprivileged(t testing.TB) *syscall.Credential {
	t.Helper()
	for _, name := range []string{"postgres", "nobody"} {
		u, err := user.Lookup(name)
		if err != nil {
			continue
		}
		uid, _ := strconv.ParseUint(u.Uid, 10, 32)
		gid, _ := strconv.ParseUint(u.Gid, 10, 32)
		return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	t.Skip("pgtest: running as root and no unprivileged user (postgres, nobody) to run a throwaway server (no variable enables it: run the tests as a non-root user, or create user postgres)")
	return nil
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

func freePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

func (s *Server) data() string { return filepath.Join(s.dir, "data") }

func (s *Server) pgCtl(args ...string) *osexec.Cmd {
	c := osexec.Command(filepath.Join(s.bin, "pg_ctl"), append([]string{"-D", s.data()}, args...)...)
	c.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	return c
}

// Start starts the server (again) and waits until it accepts connections.
func (s *Server) Start(t testing.TB) {
	t.Helper()
	opts := fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=60", s.port, s.dir)
	if out, err := s.pgCtl("-o", opts, "-l", filepath.Join(s.dir, "log"), "-w", "-t", "60", "start").CombinedOutput(); err != nil {
		log, _ := os.ReadFile(filepath.Join(s.dir, "log"))
		t.Fatalf("pgtest: pg_ctl start: %v\n%s\n%s", err, out, log)
	}
}

// Stop shuts the server down (fast mode: sessions are ended, in-progress
// transactions rolled back) and waits until it is down.
func (s *Server) Stop(t testing.TB) {
	t.Helper()
	if out, err := s.pgCtl("-m", "fast", "-w", "-t", "60", "stop").CombinedOutput(); err != nil {
		t.Fatalf("pgtest: pg_ctl stop: %v\n%s", err, out)
	}
}
