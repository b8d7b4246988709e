// Package pgtest runs a real PostgreSQL server (Debian's postgresql-15) for
// tests: one server per test binary, in a temporary directory, listening on
// loopback, and a fresh database per test.
//
// A package whose tests use it wraps them in Main:
//
//	func TestMain(m *testing.M) { pgtest.Main(m) }
//
// (or calls Run from a TestMain that does more), and each test calls DB
// for the DSN of its own database. Without Main or Run, DB starts a server
// for that test alone (slower, still correct). Without the server's
// binaries a test skips, except under CI=true (where .ci/setup installs
// them), where it fails.
package pgtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/aileron-dev/aileron-proxy/internal/hostport"
	"github.com/aileron-dev/aileron-proxy/internal/testkit"
)

// BinDir is where Debian's postgresql-15 package installs the server.
const BinDir = "/usr/lib/postgresql/15/bin"

// Superuser is the server's superuser; its password is Password. Every DSN
// DB returns connects as this user over TCP with SCRAM authentication.
const (
	Superuser = "aileron"
	Password  = "pgtest-password"
)

// Server is one running PostgreSQL server.
type Server struct {
	dir  string // temporary directory: data/, the unix socket, the log
	port int
	cred *syscall.Credential // whom the server runs as; nil: the current user
	cmd  *exec.Cmd
	done chan struct{} // closed when the postgres process exited
	logs *syncBuffer
	n    atomic.Int64 // databases created, for unique names
}

// shared is the server of the test binary when Main wraps it.
var shared struct {
	enabled bool
	once    sync.Once
	srv     *Server
	err     error
	skip    string
}

// Main runs the package's tests (m.Run) with one shared server, started by
// the first DB call, and stops and removes it afterwards; it exits with
// m.Run's code.
func Main(m *testing.M) { os.Exit(Run(m)) }

// Run is Main for a TestMain that does more: it returns m.Run's code
// instead of exiting.
func Run(m *testing.M) int {
	shared.enabled = true
	code := m.Run()
	if shared.srv != nil {
		shared.srv.Stop()
	}
	return code
}

// DB creates a fresh database for t, dropped at t's cleanup, and returns a
// DSN (postgres://user:password@127.0.0.1:port/db?sslmode=disable) for it.
func DB(t testing.TB) string {
	t.Helper()
	srv := server(t)
	name := fmt.Sprintf("t%d_%s", srv.n.Add(1), sanitize(t.Name()))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := srv.exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		t.Fatalf("pgtest: creating database %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := srv.exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			t.Errorf("pgtest: dropping database %s: %v", name, err)
		}
	})
	return srv.DSN(name)
}

// Own starts a server for t alone, stopped and removed at t's cleanup, for
// a test that restarts or stops it. Its empty "postgres" database is
// there to use (DSN("postgres")).
func Own(t testing.TB) *Server {
	t.Helper()
	requireBinaries(t)
	srv, err := Start()
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(srv.Stop)
	return srv
}

// server returns the shared server under Main, or one of t's own.
func server(t testing.TB) *Server {
	t.Helper()
	requireBinaries(t)
	if !shared.enabled {
		return Own(t)
	}
	shared.once.Do(func() { shared.srv, shared.err = Start() })
	if shared.err != nil {
		t.Fatalf("pgtest: %v", shared.err)
	}
	return shared.srv
}

// requireBinaries skips t (fails it under CI=true) without the server.
func requireBinaries(t testing.TB) {
	t.Helper()
	for _, b := range []string{"initdb", "postgres"} {
		testkit.RequireTool(t, filepath.Join(BinDir, b))
	}
}

// Start initialises a cluster in a new temporary directory and runs its
// server on a free loopback port until Stop. Running as root, the server
// runs as the `postgres` system user (PostgreSQL refuses root), which owns
// the directory; otherwise it runs as the current user.
func Start() (*Server, error) {
	sweepStale()
	dir, err := os.MkdirTemp("", dirPrefix)
	if err != nil {
		return nil, fmt.Errorf("creating the server's directory: %w", err)
	}
	srv := &Server{dir: dir, logs: &syncBuffer{}}
	if err := srv.start(); err != nil {
		srv.Stop()
		return nil, err
	}
	return srv, nil
}

// dirPrefix names the servers' temporary directories.
const dirPrefix = "pgtest-"

// sweepStale removes the directories of servers whose test binary was
// killed before Stop (the server itself got SIGQUIT): older than ten
// minutes, with no live postmaster. A directory still in initdb, or whose
// server runs, is left alone.
func sweepStale() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), dirPrefix+"*"))
	for _, d := range dirs {
		st, err := os.Stat(d)
		if err != nil || !st.IsDir() || time.Since(st.ModTime()) < 10*time.Minute {
			continue
		}
		if pidFile, err := os.ReadFile(filepath.Join(d, "data", "postmaster.pid")); err == nil {
			line, _, _ := strings.Cut(string(pidFile), "\n")
			if pid, err := strconv.Atoi(strings.TrimSpace(line)); err == nil && alive(pid) {
				continue
			}
		}
		_ = os.RemoveAll(d)
	}
}

// alive reports whether process pid exists (EPERM: it does, another
// user's).
func alive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

func (s *Server) start() error {
	cred, err := serverUser()
	if err != nil {
		return err
	}
	if cred != nil {
		if err := os.Chown(s.dir, int(cred.Uid), int(cred.Gid)); err != nil {
			return fmt.Errorf("giving %s to the postgres user: %w", s.dir, err)
		}
	}
	pwfile := filepath.Join(s.dir, "pwfile")
	if err := os.WriteFile(pwfile, []byte(Password+"\n"), 0o600); err != nil {
		return err
	}
	if cred != nil {
		if err := os.Chown(pwfile, int(cred.Uid), int(cred.Gid)); err != nil {
			return err
		}
	}
	data := filepath.Join(s.dir, "data")
	initdb := exec.Command(filepath.Join(BinDir, "initdb"), "-D", data, "-U", Superuser, "--pwfile", pwfile,
		"--auth-local=trust", "--auth-host=scram-sha-256", "-E", "UTF8", "--locale=C", "--no-sync", "--no-instructions")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGKILL}
	initdb.Env = serverEnv()
	if out, err := initdb.CombinedOutput(); err != nil {
		return fmt.Errorf("initdb in %s: %w\n%s", data, err, out)
	}
	_ = os.Remove(pwfile)

	// A free port: listen, close, let postgres take it. Another process could
	// take it in between; a failed start then says so in the server's log.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	s.port = ln.Addr().(*net.TCPAddr).Port
	ln.Close()

	s.cred = cred
	return s.run()
}

// run starts postgres on the initialised directory and waits until it
// accepts connections.
func (s *Server) run() error {
	data := filepath.Join(s.dir, "data")
	s.done = make(chan struct{})
	s.cmd = exec.Command(filepath.Join(BinDir, "postgres"), "-D", data,
		"-c", "listen_addresses=127.0.0.1", "-c", "port="+strconv.Itoa(s.port),
		"-c", "unix_socket_directories="+s.dir,
		// A throwaway server: durability off, for speed.
		"-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
		"-c", "max_connections=200", "-c", "log_min_messages=warning")
	// SIGQUIT (immediate shutdown) if the test binary dies without Stop.
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred, Pdeathsig: syscall.SIGQUIT}
	s.cmd.Env = serverEnv()
	s.cmd.Stdout, s.cmd.Stderr = s.logs, s.logs
	if err := s.cmd.Start(); err != nil {
		return fmt.Errorf("starting postgres: %w", err)
	}
	cmd, done := s.cmd, s.done
	go func() { _ = cmd.Wait(); close(done) }()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		err := s.exec(ctx, "SELECT 1")
		if err == nil {
			return nil
		}
		select {
		case <-s.done:
			return fmt.Errorf("postgres exited at start: %s", s.logs.String())
		case <-ctx.Done():
			return fmt.Errorf("postgres did not accept connections on 127.0.0.1:%d within 30s (%v): %s", s.port, err, s.logs.String())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// serverUser returns the credential the server runs as: nil (the current
// user) unless running as root, then the postgres system user's.
func serverUser() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("running as root, the server needs the postgres system user (the postgresql-15 package creates it): %w", err)
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, err
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, err
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}, nil
}

// serverEnv is the server's environment: PATH only, so no PG* variable of
// the test's environment changes what initdb or postgres do.
func serverEnv() []string {
	return []string{"PATH=/usr/bin:/bin", "LC_ALL=C"}
}

// DSN returns the URL of database db on the server.
func (s *Server) DSN(db string) string {
	u := url.URL{
		Scheme:   "postgres",
		User:     url.UserPassword(Superuser, Password),
		Host:     hostport.Join("127.0.0.1", s.port),
		Path:     "/" + db,
		RawQuery: "sslmode=disable",
	}
	return u.String()
}

// Addr returns the server's host:port.
func (s *Server) Addr() string { return hostport.Join("127.0.0.1", s.port) }

// exec runs one statement in the maintenance database.
func (s *Server) exec(ctx context.Context, sql string) error {
	conn, err := pgx.Connect(ctx, s.DSN("postgres"))
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, sql)
	return err
}

// Stop shuts the server down (fast shutdown, then a kill after 10s) and
// removes its directory.
func (s *Server) Stop() {
	s.halt()
	_ = os.RemoveAll(s.dir)
}

// halt stops the server process, keeping its data.
func (s *Server) halt() {
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-s.done:
		case <-time.After(10 * time.Second):
			_ = s.cmd.Process.Kill()
			<-s.done
		}
	}
}

// Restart shuts the server down (every connection is closed, as when a
// database fails over or restarts), leaves it down for down, and starts it
// again on the same port with the same data. Only for a server of the
// test's own (Own), never the shared one.
func (s *Server) Restart(down time.Duration) error {
	s.halt()
	time.Sleep(down)
	return s.run()
}

// Logs returns what the server wrote to stdout and stderr.
func (s *Server) Logs() string { return s.logs.String() }

// sanitize turns a test name into part of a database name (at most 63
// bytes in all, letters, digits and underscores).
func sanitize(name string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(name) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
		if b.Len() >= 40 {
			break
		}
	}
	return b.String()
}

// syncBuffer is a bytes.Buffer safe for the server's output goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
