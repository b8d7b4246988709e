package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// toolsImage builds, once per test run and runtime, the sandbox image of a
// project scaffolded by `sandbox init` (so its containerEnv holds the
// placeholder AWS keys) whose Dockerfile adds Debian's git and awscli.
func toolsImage(t *testing.T, kind string) string {
	t.Helper()
	return buildSharedImage(t, "credtools", kind, nil, func(home, project string) error {
		if out, errOut, code := launchCLI(t, home, nil, time.Minute, "sandbox", "init", "--project", project); code != 0 {
			return fmt.Errorf("sandbox init: exit %d\n%s%s", code, out, errOut)
		}
		df := filepath.Join(project, ".devcontainer", "Dockerfile")
		raw, err := os.ReadFile(df)
		if err != nil {
			return err
		}
		const at = "USER root\n"
		if !strings.Contains(string(raw), at) {
			return fmt.Errorf("the scaffolded Dockerfile has no %q line to add packages after", strings.TrimSpace(at))
		}
		s := strings.Replace(string(raw), at, at+"RUN apt-get update && apt-get install -y --no-install-recommends git awscli ca-certificates \\\n && rm -rf /var/lib/apt/lists/*\n", 1)
		return os.WriteFile(df, []byte(s), 0o644)
	})
}

// awaitPending waits for a pending approval of operation other than the
// ids in seen, giving up when done is closed (the launch ended) or after
// limit.
func awaitPending(t *testing.T, home, operation string, seen map[string]bool, done <-chan struct{}, limit time.Duration) map[string]any {
	t.Helper()
	for deadline := time.Now().Add(limit); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		select {
		case <-done:
			return nil
		default:
		}
		out, _, code := cli(t, home, "", "approvals", "list", "--json")
		var list []map[string]any
		if code != 0 || json.Unmarshal([]byte(out), &list) != nil {
			continue
		}
		for _, p := range list {
			if p["state"] == "pending" && p["operation"] == operation && !seen[fmt.Sprint(p["id"])] {
				return p
			}
		}
	}
	return nil
}

type launched struct {
	out, errOut string
	code        int
}

// launchScript runs `sh -c script agent args...` in a sandbox launched from
// project with the image already built; the result arrives once launch
// exits, and done is closed then.
func launchScript(t *testing.T, home, kind, project, script string, args ...string) (<-chan launched, <-chan struct{}) {
	res := make(chan launched, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		argv := append([]string{"launch", "--sandbox=" + kind, "--sandbox-build=never", "--project", project, "--", "sh", "-c", script, "agent"}, args...)
		o, eo, c := launchCLI(t, home, nil, 8*time.Minute, argv...)
		res <- launched{o, eo, c}
	}()
	return res, done
}

// gitPushSandboxScript clones acme/tools through the proxy inside the
// sandbox (HTTPS_PROXY and GIT_SSL_CAINFO come from launch), pushes a
// commit to feature (held, then approved) and one to second (held, then
// denied).
const gitPushSandboxScript = `check() { if [ "$2" = 0 ]; then echo "ok $1"; else echo "FAIL $1: $3"; fi; }
export GIT_TERMINAL_PROMPT=0 GIT_AUTHOR_NAME=agent GIT_AUTHOR_EMAIL=agent@example.test GIT_COMMITTER_NAME=agent GIT_COMMITTER_EMAIL=agent@example.test
out=$(git clone -q https://github.com/acme/tools.git /tmp/tools 2>&1); check clone $? "$out"
cd /tmp/tools || exit 1
git commit -q --allow-empty -m "work for feature"
echo "feature-id $(git rev-parse HEAD)"
out=$(git push origin HEAD:refs/heads/feature 2>&1); check push-approved $? "$out"
git commit -q --allow-empty -m "work for second"
echo "second-id $(git rev-parse HEAD)"
if out=$(git push origin HEAD:refs/heads/second 2>&1); then r=1; else r=0; fi
check push-denied $r "$out"
echo "denied-push-output:"; echo "$out"
echo done
`

var sandboxLine = regexp.MustCompile(`(?m)^(feature|second)-id ([0-9a-f]{40})$`)

// TestGitPushInSandbox runs a real git push over smart HTTP from a launched
// sandbox through the proxy to a git http-backend stand-in for github.com:
// held with its ref update in `approvals list` and the console, landed
// once approved; a second push is denied and git prints the refusal.
func TestGitPushInSandbox(t *testing.T) {
	for _, kind := range []string{"docker", "podman"} {
		t.Run(kind, func(t *testing.T) {
			requireRuntime(t, kind)
			g := newGitPushServe(t, "300s")
			t.Cleanup(func() { removeSandboxes(t, kind, g.home) })
			project := toolsImage(t, kind)

			res, done := launchScript(t, g.home, kind, project, gitPushSandboxScript)
			fail := func(format string, args ...any) {
				t.Helper()
				var r launched
				select {
				case r = <-res:
				case <-time.After(90 * time.Second):
				}
				t.Fatalf(format+"\nlaunch exit %d; sandbox output:\n%s\nlaunch stderr:\n%s\nserve:\n%s", append(args, r.code,
					redactCanary(r.out), redactCanary(lastN(r.errOut, 3000)), redactCanary(lastN(g.d.stderr.String(), 3000)))...)
			}
			p := awaitPending(t, g.home, "git.receive-pack", nil, done, 8*time.Minute)
			if p == nil {
				fail("no pending git.receive-pack approval appeared")
			}
			if n := receivePacks(g.up); n != 0 {
				t.Fatalf("the upstream received %d receive-pack requests before approval", n)
			}
			raw, _ := json.Marshal(p["preview"])
			var pv struct {
				GitPush struct {
					Repository string `json:"repository"`
					Updates    []struct{ Ref, Old, New, Action string }
				} `json:"git_push"`
			}
			if err := json.Unmarshal(raw, &pv); err != nil {
				t.Fatal(err)
			}
			gp := pv.GitPush
			if gp.Repository != "github.com/acme/tools.git" || len(gp.Updates) != 1 || gp.Updates[0].Ref != "refs/heads/feature" ||
				gp.Updates[0].Action != "create" || len(gp.Updates[0].New) != 40 {
				fail("approval preview = %s, want one update creating refs/heads/feature of github.com/acme/tools.git", raw)
			}
			id := gp.Updates[0].New
			list := mustCLI(t, g.home, "", "approvals", "list")
			if want := "push refs/heads/feature " + id[:12] + " (create)"; !strings.Contains(list, want) {
				t.Errorf("approvals list does not show %q:\n%s", want, list)
			}
			if html := g.consolePage(t, "/ui/approvals"); !strings.Contains(html, `<td class="mono new">`+id+`</td>`) {
				t.Errorf("the console's approvals page lacks the new id %s", id)
			}
			first := fmt.Sprint(p["id"])
			mustCLI(t, g.home, "", "approvals", "approve", first)

			p = awaitPending(t, g.home, "git.receive-pack", map[string]bool{first: true}, done, 3*time.Minute)
			if p == nil {
				fail("the second push was not held")
			}
			if got := g.bareRef("refs/heads/feature"); got != id {
				t.Errorf("after approval the upstream's refs/heads/feature = %q, want %s", got, id)
			}
			before := receivePacks(g.up)
			mustCLI(t, g.home, "", "approvals", "deny", fmt.Sprint(p["id"]))

			var r launched
			select {
			case r = <-res:
			case <-time.After(5 * time.Minute):
				t.Fatal("launch did not finish after the denial")
			}
			for _, want := range []string{"clone", "push-approved", "push-denied"} {
				if !strings.Contains(r.out, "ok "+want+"\n") {
					t.Errorf("check %s did not pass", want)
				}
			}
			ids := map[string]string{}
			for _, m := range sandboxLine.FindAllStringSubmatch(r.out, -1) {
				ids[m[1]] = m[2]
			}
			if ids["feature"] != id {
				t.Errorf("the held push showed %s, but the sandbox committed %q", id, ids["feature"])
			}
			_, denied, _ := strings.Cut(r.out, "denied-push-output:\n")
			for _, want := range []string{"[remote rejected]", "HEAD -> second", "needs a person's approval and it was denied"} {
				if !strings.Contains(denied, want) {
					t.Errorf("git's output in the sandbox after a denial lacks %q", want)
				}
			}
			if got := g.bareRef("refs/heads/second"); got != "" || receivePacks(g.up) != before || ids["second"] == "" {
				t.Errorf("a denied push reached the upstream (refs/heads/second = %q; the sandbox committed %q)", got, ids["second"])
			}
			if r.code != 0 || strings.Contains(r.out, "FAIL") || !strings.Contains(r.out, "done\n") || t.Failed() {
				t.Fatalf("launch exit %d; sandbox output:\n%s\nlaunch stderr:\n%s", r.code, redactCanary(r.out), redactCanary(lastN(r.errOut, 3000)))
			}
			waitAudit(t, g.home, map[string]any{"event": "connector.proxy.denied", "reason": "approval_denied", "operation": "git.receive-pack"})
		})
	}
}

// awsSandboxScript runs Debian's AWS CLI inside the sandbox with the
// placeholder keys of the scaffolded containerEnv (REQUESTS_CA_BUNDLE and
// HTTPS_PROXY come from launch), then scans the sandbox for the real
// secret and session token ($1 matches them without containing them).
const awsSandboxScript = `check() { if [ "$2" = 0 ]; then echo "ok $1"; else echo "FAIL $1: $3"; fi; }
has() { case $2 in *"$1"*) echo 0 ;; *) echo 1 ;; esac; }
pat=$1
mkdir -p /tmp/awscfg
printf '[default]\nregion = us-east-1\ns3 =\n  addressing_style = path\n  multipart_threshold = 64MB\n' > /tmp/awscfg/config
export AWS_CONFIG_FILE=/tmp/awscfg/config AWS_EC2_METADATA_DISABLED=true AWS_PAGER=
check placeholder-keys "$([ "$AWS_ACCESS_KEY_ID" = aileron-injected ] && [ "$AWS_SECRET_ACCESS_KEY" = aileron-injected ]; echo $?)" "AWS_ACCESS_KEY_ID=$AWS_ACCESS_KEY_ID"
out=$(aws sts get-caller-identity --output text 2>&1)
check sts "$(has arn:aws:iam::123456789012:user/agent "$out")" "$out"
echo "hello from the sandbox" > /tmp/small.txt
out=$(aws s3 cp /tmp/small.txt s3://agent-bucket/small.txt 2>&1); check cp-up $? "$out"
head -c 20971520 /dev/urandom > /tmp/big.bin
echo "big-sha256 $(sha256sum /tmp/big.bin | cut -d' ' -f1)"
out=$(aws s3 cp /tmp/big.bin s3://agent-bucket/big.bin 2>&1); check cp-big $? "$out"
out=$(aws s3 ls s3://agent-bucket 2>&1)
case $out in *small.txt*) case $out in *"20971520 big.bin"*) r=0 ;; *) r=1 ;; esac ;; *) r=1 ;; esac; check ls $r "$out"
out=$(aws s3 cp s3://agent-bucket/small.txt /tmp/down.txt 2>&1) && cmp -s /tmp/small.txt /tmp/down.txt; check cp-down $? "$out"
if out=$(aws s3 rm s3://agent-bucket/small.txt 2>&1); then r=1; else
  case $out in *403*|*Forbidden*) r=0 ;; *) r=1 ;; esac; fi; check rm-refused $r "$out"
rm -f /tmp/big.bin
` + sandboxSecretScan + `echo done
`

// TestAWSCLIInSandbox runs Debian's AWS CLI in a launched sandbox holding
// only placeholder keys, through the proxy, against the stand-in that
// verifies every signature with the real secret: STS, s3 ls, cp up and
// down, a 20 MiB upload; an undeclared DeleteObject is refused; neither
// the secret nor the session token is anywhere in the sandbox, launch's
// output, serve's log or the audit.
func TestAWSCLIInSandbox(t *testing.T) {
	for _, kind := range []string{"docker", "podman"} {
		t.Run(kind, func(t *testing.T) {
			requireRuntime(t, kind)
			standIn := &awsStandIn{keyID: awsRealKeyID, secret: canary, token: awsSessionToken, objects: map[string][]byte{}, verified: map[string]int{}}
			dir := t.TempDir()
			for name, v := range map[string]string{"key": awsRealKeyID, "secret": canary, "token": awsSessionToken} {
				if err := os.WriteFile(filepath.Join(dir, name), []byte(v+"\n"), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			e, up := awsEnv(t, standIn, nil, "--access-key-id-from-file", filepath.Join(dir, "key"),
				"--from-file", filepath.Join(dir, "secret"), "--session-token-from-file", filepath.Join(dir, "token"))
			t.Cleanup(func() { removeSandboxes(t, kind, e.home) })
			project := toolsImage(t, kind)

			tokenPattern := awsSessionToken[:len(awsSessionToken)-1] + "[" + awsSessionToken[len(awsSessionToken)-1:] + "]"
			res, _ := launchScript(t, e.home, kind, project, awsSandboxScript, canaryPattern()+"|"+tokenPattern)
			r := <-res
			for _, want := range []string{"placeholder-keys", "sts", "cp-up", "cp-big", "ls", "cp-down", "rm-refused"} {
				if !strings.Contains(r.out, "ok "+want+"\n") {
					t.Errorf("check %s did not pass", want)
				}
			}
			if !strings.Contains(r.out, "aileron-canary-found:0\n") {
				t.Errorf("the real secret or session token is in the sandbox (or the scan did not run)")
			}
			for _, s := range []string{canary, awsSessionToken} {
				if strings.Contains(r.out+r.errOut, s) {
					t.Errorf("launch's output holds a real secret")
				}
			}
			if r.code != 0 || strings.Contains(r.out, "FAIL") || !strings.Contains(r.out, "done\n") || t.Failed() {
				t.Fatalf("launch exit %d; sandbox output:\n%s\nlaunch stderr:\n%s\nserve:\n%s", r.code, redactCanary(r.out),
					redactCanary(lastN(r.errOut, 3000)), redactCanary(lastN(e.d.stderr.String(), 3000)))
			}

			standIn.mu.Lock()
			defer standIn.mu.Unlock()
			if len(standIn.bad) > 0 {
				t.Fatalf("the stand-in saw signatures that do not verify: %v", standIn.bad)
			}
			for _, want := range []string{"POST sts", "PUT s3", "GET s3", "HEAD s3"} {
				if standIn.verified[want] == 0 {
					t.Errorf("no verified %s request (verified: %v)", want, standIn.verified)
				}
			}
			m := regexp.MustCompile(`(?m)^big-sha256 ([0-9a-f]{64})$`).FindStringSubmatch(r.out)
			if m == nil || fmt.Sprintf("%x", sha256sum(standIn.objects["big.bin"])) != m[1] {
				t.Errorf("the stand-in stored %d bytes of the 20 MiB upload, not the sandbox's file", len(standIn.objects["big.bin"]))
			}
			if string(standIn.objects["small.txt"]) != "hello from the sandbox\n" {
				t.Errorf("the stand-in stored small.txt as %q; the refused DeleteObject must leave it", standIn.objects["small.txt"])
			}
			for _, q := range up.requests() {
				if q.Method == "DELETE" {
					t.Errorf("the undeclared DeleteObject reached the stand-in")
				}
				for k, vs := range q.Header {
					for _, v := range vs {
						if strings.Contains(v, "aileron-injected") {
							t.Errorf("stand-in %s %s: header %s carries the placeholder", q.Method, q.Path, k)
						}
					}
				}
			}
			waitAudit(t, e.home, map[string]any{"event": "connector.proxy.denied", "method": "DELETE"})
		})
	}
}
