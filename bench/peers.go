package main

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/aileron-dev/aileron-proxy/internal/testkit"
)

const (
	squidCertgen = "/usr/lib/squid/security_file_certgen"
	notInstalled = "skipped: not installed (make bench-peers)"
)

// lookPeer finds a peer binary on PATH or in the sbin directories root's
// PATH has and a user's may not.
func lookPeer(name string) (string, bool) {
	if p, err := exec.LookPath(name); err == nil {
		return p, true
	}
	for _, dir := range []string{"/usr/sbin", "/sbin", "/usr/local/sbin"} {
		p := filepath.Join(dir, name)
		if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return p, true
		}
	}
	return "", false
}

func firstLine(ctx context.Context, bin string, args ...string) string {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = testkit.CleanEnv()
	out, err := cmd.Output()
	if err != nil {
		return ""
	}
	line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	return strings.TrimSpace(line)
}

// startMitmproxy runs mitmdump with a per-run ECDSA CA in its confdir,
// upstream verification against the origin CA, and bodies over 1 MiB
// streamed (mitmproxy's default buffers whole bodies). Its one-line-per-flow
// output goes to a log file, like the others' access logs.
func startMitmproxy(ctx context.Context, dir string, o *origin, cleanup *cleanups) (*target, error) {
	bin, ok := lookPeer("mitmdump")
	if !ok {
		return &target{name: targetMitm, skipped: notInstalled}, nil
	}
	version := strings.TrimPrefix(firstLine(ctx, bin, "--version"), "Mitmproxy: ")
	ca, err := newAuthority("mitmproxy bench CA")
	if err != nil {
		return nil, err
	}
	conf := filepath.Join(dir, "mitmproxy")
	if err := os.MkdirAll(conf, 0o700); err != nil {
		return nil, fmt.Errorf("creating %s: %w", conf, err)
	}
	// mitmproxy reads the CA key and certificate from one file, and signs
	// its leaves with the CA's key.
	if err := os.WriteFile(filepath.Join(conf, "mitmproxy-ca.pem"), append(append([]byte{}, ca.keyPEM...), ca.certPEM...), 0o600); err != nil {
		return nil, fmt.Errorf("writing mitmproxy's CA: %w", err)
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	args := []string{
		"--listen-host", "127.0.0.1", "--listen-port", strconv.Itoa(port),
		"--set", "confdir=" + conf,
		"--set", "ssl_verify_upstream_trusted_ca=" + o.caFile,
		"--set", "stream_large_bodies=1m",
		"--set", "termlog_verbosity=warn",
	}
	if err := os.WriteFile(filepath.Join(dir, "mitmdump.args"), []byte(strings.Join(args, "\n")+"\n"), 0o644); err != nil {
		return nil, fmt.Errorf("writing mitmdump.args: %w", err)
	}
	p, addr, err := startPeer(ctx, targetMitm, exec.Command(bin, args...), filepath.Join(dir, "mitmdump.log"), port, cleanup)
	if err != nil {
		return nil, err
	}
	return &target{name: targetMitm, version: version, proxyURL: &url.URL{Scheme: "http", Host: addr}, roots: ca.pool(), proc: p}, nil
}

// squidConf is squid's configuration: ssl-bump every CONNECT with leaves
// generated from the per-run ECDSA CA and cached in memory, upstream TLS
// verified against the origin CA, no object cache, an access log.
const squidConf = `# aileron-proxy bench: squid with ssl-bump (generated per run)
http_port 127.0.0.1:%[1]d ssl-bump tls-cert=%[2]s/ca.pem tls-key=%[2]s/ca.key generate-host-certificates=on dynamic_cert_mem_cache_size=16MB
sslcrtd_program %[3]s -s %[2]s/ssl_db -M 16MB
sslcrtd_children 4 startup=1 idle=1
acl step1 at_step SslBump1
ssl_bump peek step1
ssl_bump bump all
tls_outgoing_options cafile=%[4]s
acl bench_clients src 127.0.0.1/32
http_access allow bench_clients
http_access deny all
cache deny all
cache_mem 8 MB
access_log stdio:%[2]s/access.log
cache_log %[2]s/cache.log
cache_store_log none
netdb_filename none
logfile_rotate 0
pid_filename %[2]s/squid.pid
coredump_dir %[2]s
max_filedescriptors 8192
shutdown_lifetime 1 seconds
pinger_enable off
visible_hostname aileron-bench
`

// startSquid runs `squid -N` (no daemon, no worker kids: one process to
// measure) with a config written for this run.
func startSquid(ctx context.Context, dir string, o *origin, cleanup *cleanups) (*target, error) {
	bin, ok := lookPeer("squid")
	if !ok {
		return &target{name: targetSquid, skipped: notInstalled}, nil
	}
	if _, err := os.Stat(squidCertgen); err != nil {
		return &target{name: targetSquid, skipped: "skipped: " + squidCertgen + " missing; install squid-openssl (make bench-peers)"}, nil
	}
	version := strings.TrimPrefix(firstLine(ctx, bin, "-v"), "Squid Cache: ")
	ca, err := newAuthority("squid bench CA")
	if err != nil {
		return nil, err
	}
	sdir := filepath.Join(dir, "squid")
	if err := os.MkdirAll(sdir, 0o700); err != nil {
		return nil, fmt.Errorf("creating %s: %w", sdir, err)
	}
	for name, body := range map[string][]byte{"ca.pem": ca.certPEM, "ca.key": ca.keyPEM} {
		if err := os.WriteFile(filepath.Join(sdir, name), body, 0o600); err != nil {
			return nil, fmt.Errorf("writing squid's %s: %w", name, err)
		}
	}
	originCA := filepath.Join(sdir, "origin-ca.pem")
	if err := os.WriteFile(originCA, o.caPEM, 0o644); err != nil {
		return nil, fmt.Errorf("writing squid's origin CA: %w", err)
	}
	init := exec.CommandContext(ctx, squidCertgen, "-c", "-s", filepath.Join(sdir, "ssl_db"), "-M", "16MB")
	init.Env = testkit.CleanEnv()
	if out, err := init.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("initialising squid's certificate database: %w: %s", err, out)
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	confPath := filepath.Join(sdir, "squid.conf")
	if err := os.WriteFile(confPath, fmt.Appendf(nil, squidConf, port, sdir, squidCertgen, originCA), 0o644); err != nil {
		return nil, fmt.Errorf("writing squid.conf: %w", err)
	}
	// Started as root, squid drops to cache_effective_user (proxy), which
	// must own its directory and reach it.
	if os.Geteuid() == 0 {
		if err := chownTree(sdir, "proxy"); err != nil {
			return nil, err
		}
		if err := os.Chmod(dir, 0o711); err != nil {
			return nil, fmt.Errorf("opening %s to squid's user: %w", dir, err)
		}
	}
	p, addr, err := startPeer(ctx, targetSquid, exec.Command(bin, "-N", "-f", confPath), filepath.Join(dir, "squid.stderr.log"), port, cleanup)
	if err != nil {
		raw, _ := os.ReadFile(filepath.Join(sdir, "cache.log"))
		return nil, fmt.Errorf("%w\ncache.log:\n%s", err, tail(string(raw), 20))
	}
	return &target{name: targetSquid, version: version, proxyURL: &url.URL{Scheme: "http", Host: addr}, roots: ca.pool(), proc: p}, nil
}

// peerEnv is the peers' environment: testkit.CleanEnv plus the Python
// output settings it drops with every PYTHON* variable. mitmdump is Python,
// and PYTHONUNBUFFERED decides how it writes its flow log, so dropping it
// would change what is measured; neither setting adds trust.
func peerEnv() []string {
	var keep []string
	for _, k := range []string{"PYTHONUNBUFFERED", "PYTHONDONTWRITEBYTECODE"} {
		if v, ok := os.LookupEnv(k); ok {
			keep = append(keep, k+"="+v)
		}
	}
	return testkit.CleanEnv(keep...)
}

// startPeer starts a peer proxy with a clean environment, registers its
// stop with cleanup and waits up to 60s until it listens on 127.0.0.1:port.
func startPeer(ctx context.Context, name string, cmd *exec.Cmd, logPath string, port int, cleanup *cleanups) (*process, string, error) {
	cmd.Env = peerEnv()
	p, err := startProcess(name, cmd, logPath)
	if err != nil {
		return nil, "", err
	}
	cleanup.add(func() { p.stop(5 * time.Second) })
	addr := "127.0.0.1:" + strconv.Itoa(port)
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := waitListening(wctx, p, addr); err != nil {
		return nil, "", err
	}
	return p, addr, nil
}

func chownTree(root, username string) error {
	u, err := user.Lookup(username)
	if err != nil {
		return fmt.Errorf("looking up squid's user %q: %w", username, err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return filepath.Walk(root, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if err := os.Lchown(p, uid, gid); err != nil {
			return fmt.Errorf("handing %s to %s: %w", p, username, err)
		}
		return nil
	})
}

// tail returns the last lines of s.
func tail(s string, lines int) string {
	all := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return strings.Join(all, "\n")
}
