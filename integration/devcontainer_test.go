package integration

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aileron-dev/aileron-proxy/internal/registrytest"
	"github.com/aileron-dev/aileron-proxy/launcher"
	"github.com/aileron-dev/aileron-proxy/launcher/devcontainer"
)

// devcontainerAgentScript runs inside the sandbox as `sh -c SCRIPT agent
// HOST_SERVICE_PORT`: one "ok NAME" or "FAIL NAME: detail" line per check.
const devcontainerAgentScript = `check() { if [ "$2" = 0 ]; then echo "ok $1"; else echo "FAIL $1: $3"; fi; }
[ "$(id -un)" = dev ]; check remote-user $? "runs as $(id -un)"
out=$(localtool 2>&1); [ "$out" = "localtool color=blue user=dev" ]; check local-feature $? "$out"
out=$(ocitool 2>&1); [ "$out" = "ocitool version=2.0 user=dev" ]; check oci-feature $? "$out"
out=$(basetool 2>&1); [ "$out" = "basetool version=from-dependsOn user=dev" ]; check depends-on $? "$out"
[ "$OCITOOL_HOME" = /opt/ocitool ]; check feature-env $? "OCITOOL_HOME=$OCITOOL_HOME"
[ "$(cat /opt/order)" = "localtool basetool ocitool " ]; check feature-order $? "$(cat /opt/order)"
[ "$(cat /data/shared.txt 2>&1)" = shared-from-host ]; check mount $? "$(cat /data/shared.txt 2>&1)"
touch /data/new 2>/dev/null; [ $? != 0 ]; check mount-readonly $? "wrote into the read-only mount"
[ "$(cat "$HOME/created.txt" 2>&1)" = created ]; check post-create-home $? "$(cat "$HOME/created.txt" 2>&1)"
[ "$(cat /home/agent/workspace/lifecycle-user 2>&1)" = dev ]; check post-create-user $? "$(cat /home/agent/workspace/lifecycle-user 2>&1)"
[ "$GREETING" = hello-from-launch ]; check remote-env $? "GREETING=$GREETING"
case $PATH in *:/opt/extra/bin) r=0 ;; *) r=1 ;; esac; check container-env-path $r "PATH=$PATH"
[ "$PROJECT_ID_LEN" = 52 ]; check devcontainer-id $? "PROJECT_ID_LEN=$PROJECT_ID_LEN"
case $HTTPS_PROXY in *evil*) r=1 ;; *) r=0 ;; esac; check contract-kept $r "HTTPS_PROXY was overridden"
out=$(curl -sS --max-time 30 https://api.example.test/v1/items 2>&1)
case $out in *'"items":[{"id":"1"}]'*) r=0 ;; *) r=1 ;; esac; check proxy $r "$out"
gw=${AILERON_API_URL#http://}; gw=${gw%%:*}
out=$(curl -sS --noproxy '*' --connect-timeout 5 --max-time 8 "http://$gw:$1/" 2>&1)
check egress-lock "$([ $? != 0 ]; echo $?)" "reached a host service at $gw:$1: $out"
echo done
`

// TestLaunchDevcontainer launches a typical project devcontainer in real
// Docker and Podman: a Dockerfile adding user "dev" (remoteUser), a
// read-only bind mount whose source comes from ${localEnv:...}, a
// postCreateCommand (object form, entries in parallel) writing files,
// remoteEnv with ${localEnv:...} and ${containerEnv:PATH}, an allowed
// runArgs entry, a local feature and an OCI feature from a local
// docker-registry (with options, containerEnv and a dependsOn on another
// OCI feature that is not listed). The agent sees each, and the egress
// lock still holds.
func TestLaunchDevcontainer(t *testing.T) {
	for _, kind := range []string{"docker", "podman"} {
		t.Run(kind, func(t *testing.T) {
			requireRuntime(t, kind)
			reg := registrytest.Start(t)
			e := newEnv(t)
			t.Cleanup(func() { removeSandboxes(t, kind, e.home) })
			project := filepath.Join(t.TempDir(), "devc-"+kind)
			data := filepath.Join(t.TempDir(), "data")
			for _, d := range []string{filepath.Join(project, ".devcontainer"), data} {
				if err := os.MkdirAll(d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			files := map[string]string{
				filepath.Join(data, "shared.txt"):                     "shared-from-host\n",
				filepath.Join(project, ".devcontainer", "Dockerfile"): "FROM " + launcher.BaseImage("") + "\nUSER root\nRUN useradd --create-home --uid 1001 --shell /bin/sh dev\nUSER agent\n",
				filepath.Join(project, devcontainer.Path): `{
  // a typical project devcontainer
  "build": {"dockerfile": "Dockerfile"},
  "remoteUser": "dev",
  "mounts": ["source=${localEnv:DEVC_DATA},target=/data,type=bind,readonly"],
  "postCreateCommand": {
    "home": "echo created > \"$HOME/created.txt\"",
    "user": ["sh", "-c", "id -un > ${containerWorkspaceFolder}/lifecycle-user"],
  },
  "containerEnv": {"PROJECT_ID": "${devcontainerId}"},
  "remoteEnv": {
    "GREETING": "${localEnv:DEVC_GREETING}",
    "PATH": "${containerEnv:PATH}:/opt/extra/bin",
    "PROJECT_ID_LEN": "52",
    "HTTPS_PROXY": "http://evil.invalid:1",
  },
  "runArgs": ["--memory=1g", "--label", "team=ml"],
}`,
			}
			for p, body := range files {
				if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			// The project belongs to dev's uid, so dev keeps it (as root
			// CI runs); otherwise dev is remapped to the test's uid.
			_ = os.Chown(project, 1001, 1001)
			defer func() {
				for _, repo := range []string{"aileron/sandbox-devc-" + kind, launcher.FeaturesRepository} {
					out, _ := runtimeOutput(kind, "images", "--format", "{{.Repository}}:{{.Tag}}", repo)
					for _, ref := range strings.Fields(out) {
						_, _ = runtimeOutput(kind, "rmi", "--force", "--no-prune", ref)
					}
				}
			}()
			// Features: install.sh writes a tool printing its options.
			feature := func(id, meta, opt string) string {
				dir := t.TempDir()
				install := "#!/bin/sh\nset -e\nprintf '#!/bin/sh\\necho " + id + " " + opt + "=%s user=%s\\n' \"$" + strings.ToUpper(opt) + "\" \"$_REMOTE_USER\" > /usr/local/bin/" + id + "\nchmod 755 /usr/local/bin/" + id + "\nprintf '" + id + " ' >> /opt/order\n"
				for n, body := range map[string]string{"devcontainer-feature.json": meta, "install.sh": install} {
					if err := os.WriteFile(filepath.Join(dir, n), []byte(body), 0o644); err != nil {
						t.Fatal(err)
					}
				}
				return dir
			}
			registrytest.PushFeature(t, reg+"/features/basetool:1", feature("basetool", `{"id": "basetool", "options": {"version": {"type": "string", "default": "base-default"}}}`, "version"))
			registrytest.PushFeature(t, reg+"/features/ocitool:1", feature("ocitool",
				`{"id": "ocitool", "options": {"version": {"type": "string", "default": "1.0"}}, "containerEnv": {"OCITOOL_HOME": "/opt/ocitool"},
				  "dependsOn": {"`+reg+`/features/basetool:1": {"version": "from-dependsOn"}}}`, "version"))
			local := feature("localtool", `{"id": "localtool", "options": {"color": {"type": "string", "default": "red"}}}`, "color")
			if err := os.Rename(local, filepath.Join(project, ".devcontainer", "localtool")); err != nil {
				t.Fatal(err)
			}
			dcPath := filepath.Join(project, devcontainer.Path)
			dcJSON, _ := os.ReadFile(dcPath)
			withFeatures := strings.Replace(string(dcJSON), `"remoteUser": "dev",`, `"remoteUser": "dev",
  "features": {"./localtool": {"color": "blue"}, "`+reg+`/features/ocitool:1": {"version": "2.0"}},`, 1)
			if err := os.WriteFile(dcPath, []byte(withFeatures), 0o644); err != nil {
				t.Fatal(err)
			}
			hostSvc := hostService(t)
			stdout, stderr, code := launchCLI(t, e.home, []string{"DEVC_DATA=" + data, "DEVC_GREETING=hello-from-launch"}, 8*time.Minute,
				"launch", "--sandbox="+kind, "--project", project, "--", "sh", "-c", devcontainerAgentScript, "agent", hostSvc)
			for _, want := range []string{"remote-user", "local-feature", "oci-feature", "depends-on", "feature-env", "feature-order", "mount", "mount-readonly", "post-create-home", "post-create-user", "remote-env",
				"container-env-path", "devcontainer-id", "contract-kept", "proxy", "egress-lock"} {
				if !strings.Contains(stdout, "ok "+want+"\n") {
					t.Errorf("check %s did not pass", want)
				}
			}
			if code != 0 || strings.Contains(stdout, "FAIL") || !strings.Contains(stdout, "done\n") || t.Failed() {
				t.Fatalf("launch = exit %d\nagent output:\n%s\nlaunch stderr:\n%s", code, redactCanary(stdout), redactCanary(stderr))
			}
			if !strings.Contains(stderr, "aileron: running postCreateCommand: home: ") {
				t.Errorf("launch did not show the postCreateCommand it ran:\n%s", stderr)
			}
			if !strings.Contains(stderr, "ignoring remoteEnv HTTPS_PROXY") {
				t.Errorf("launch did not warn about the reserved HTTPS_PROXY:\n%s", stderr)
			}

			// A failing postCreateCommand stops the launch with its status;
			// the agent never runs.
			dc := filepath.Join(project, devcontainer.Path)
			if err := os.WriteFile(dc, []byte(`{"build": {"dockerfile": "Dockerfile"}, "remoteUser": "dev", "postCreateCommand": "exit 5"}`), 0o644); err != nil {
				t.Fatal(err)
			}
			stdout, stderr, code = launchCLI(t, e.home, nil, 5*time.Minute, "launch", "--sandbox="+kind, "--project", project, "--", "sh", "-c", "echo AGENT-RAN")
			if code != 5 || strings.Contains(stdout, "AGENT-RAN") || !strings.Contains(stderr, "postCreateCommand failed (exit 5) with exit status 5; the agent was not started") {
				t.Errorf("failing postCreateCommand: launch = exit %d\nstdout %s\nstderr %s\nwant 5 and no agent", code, stdout, redactCanary(stderr))
			}
		})
	}
}
