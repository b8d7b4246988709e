package launcher

import (
	"bufio"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aileron-dev/aileron-proxy/api"
	"github.com/aileron-dev/aileron-proxy/launcher/runtime"
)

func TestLaunchSandboxEnvContainerEnv(t *testing.T) {
	sess := &api.CreatedSession{ID: launchTestID, APIToken: launchTestToken, ProxyURL: "http://" + launchTestID + ":" + launchTestSecret + "@127.0.0.1:3128"}
	env, warnings, err := SandboxEnv(SandboxEnvInput{
		Session: sess, ProxyAddr: "10.89.3.1:4000", APIURL: "http://127.0.0.1:7700", APIAddr: "10.89.3.1:4001",
		HostAlias:    "host.containers.internal",
		ContainerEnv: map[string]string{"EDITOR": "vi", "HTTPS_PROXY": "http://elsewhere:1", "AILERON_TOKEN": "x"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if env["EDITOR"] != "vi" {
		t.Errorf("containerEnv EDITOR = %q, want vi", env["EDITOR"])
	}
	if env["HTTPS_PROXY"] != "http://"+launchTestID+":"+launchTestSecret+"@10.89.3.1:4000" || env["AILERON_TOKEN"] != launchTestToken {
		t.Errorf("containerEnv overrode the session's variables: HTTPS_PROXY=%q", redactSecrets(env["HTTPS_PROXY"]))
	}
	if env["AILERON_API_URL"] != "http://10.89.3.1:4001/v1" || env["no_proxy"] != "10.89.3.1,host.containers.internal,localhost,127.0.0.1,::1" {
		t.Errorf("AILERON_API_URL = %q, no_proxy = %q", env["AILERON_API_URL"], env["no_proxy"])
	}
	if len(warnings) != 2 || !strings.Contains(warnings[0], "AILERON_TOKEN") || !strings.Contains(warnings[1], "HTTPS_PROXY") {
		t.Errorf("warnings = %q, want one per overridden variable", warnings)
	}

	// A malformed proxy URL is reported without quoting it (it holds the secret).
	sess.ProxyURL = "http://" + launchTestID + ":" + launchTestSecret + "@[bad"
	_, _, err = SandboxEnv(SandboxEnvInput{Session: sess, ProxyAddr: "10.89.3.1:4000", APIURL: "http://127.0.0.1:7700", APIAddr: "10.89.3.1:4001"})
	if err == nil || strings.Contains(err.Error(), launchTestSecret) {
		t.Errorf("SandboxEnv(bad proxy URL) = %v, want an error without the secret", err)
	}
}

// TestLaunchSignalExecutor: a signal received while a container runs is
// relayed to the runtime CLI.
func TestLaunchSignalExecutor(t *testing.T) {
	script := filepath.Join(t.TempDir(), "fake-cli")
	body := "#!/bin/sh\ntrap 'echo got-int; exit 42' INT\necho ready\nwhile :; do sleep 0.05; done\n"
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	sigs := make(chan os.Signal, 1)
	exec := runtime.SignalExecutor(sigs)
	pr, pw := io.Pipe()
	result := make(chan error, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	go func() {
		err := exec(ctx, runtime.Command{Path: script, Args: []string{"run", "image"}, Stdout: pw})
		pw.Close()
		result <- err
	}()
	sc := bufio.NewScanner(pr)
	if !sc.Scan() || sc.Text() != "ready" {
		t.Fatalf("fake CLI did not start: %q", sc.Text())
	}
	sigs <- syscall.SIGINT
	if !sc.Scan() || sc.Text() != "got-int" {
		t.Errorf("fake CLI printed %q, want got-int", sc.Text())
	}
	go io.Copy(io.Discard, pr)
	if code, ok := runtime.ExitCode(<-result); !ok || code != 42 {
		t.Errorf("exit = %d (%v), want 42 from the relayed SIGINT", code, ok)
	}
}
