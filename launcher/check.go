package launcher

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"github.com/aileron-dev/aileron-proxy/launcher/runtime"
	"os"
	"strings"
)

// WorkspacePath is where the project is mounted and the working directory.
const WorkspacePath = "/home/agent/workspace"

// Check names, in the order they run.
const (
	CheckShell     = "shell"
	CheckWorkspace = "workspace"
	CheckAgent     = "agent"
	CheckWget      = "wget"
)

// CheckOptions configures Check.
type CheckOptions struct {
	// Image is required.
	Image string
	// Agent is the agent command (a name looked up on PATH, or an absolute
	// path); required.
	Agent string
	// Shims says connector shims will be mounted, which need wget.
	Shims bool
	// Workspace is the workspace mount (the plan's Workspace), checked
	// writable and the checks' working directory: an empty Target means
	// WorkspacePath, an empty Source a fresh temporary directory writable
	// by any user, removed afterwards. It is mounted read-write whatever
	// its ReadOnly: the check is whether the image's user may write there.
	Workspace runtime.Mount
	// User runs the checks (--user); empty means the image's USER.
	User string
	// BaseImage is named in fixes; empty means BaseImage("").
	BaseImage string

	// probeUser makes the run also print the user it runs as
	// (probeUserScript), so one run both checks the image and finds its
	// user (see checkAndProbeUser).
	probeUser bool
	// requestedUser is the user the devcontainer asked for, which a
	// failed probe names (User may differ: root for a root-owned project).
	requestedUser string
}

// CheckResult is one validation.
type CheckResult struct {
	Name string `json:"name"`
	OK   bool   `json:"ok"`
	// Detail says what was found.
	Detail string `json:"detail"`
	// Fix says what to change; empty when OK.
	Fix string `json:"fix,omitempty"`
}

// CheckReport is the outcome of Check.
type CheckReport struct {
	Image   string        `json:"image"`
	Agent   string        `json:"agent"`
	Results []CheckResult `json:"results"`
}

// OK reports whether every check passed.
func (r CheckReport) OK() bool {
	for _, c := range r.Results {
		if !c.OK {
			return false
		}
	}
	return len(r.Results) > 0
}

// Err is nil when OK, else an error listing each failure and its fix.
func (r CheckReport) Err() error {
	if r.OK() {
		return nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "checking image %s for agent %q:", r.Image, r.Agent)
	for _, c := range r.Results {
		if !c.OK {
			fmt.Fprintf(&b, "\n  %s: %s; %s", c.Name, c.Detail, c.Fix)
		}
	}
	return errors.New(b.String())
}

// checkScript runs in the container as `sh -c checkScript aileron-check
// AGENT WANT_WGET WORKSPACE`; user input arrives only as positional
// parameters, never inside the script text.
const checkScript = `echo "aileron-check:shell:ok"
echo "aileron-check:uid:$(id -u 2>/dev/null || echo unknown)"
echo "aileron-check:path:$PATH"
probe="$3/.aileron-check-$$"
if ( : > "$probe" ) 2>/dev/null && rm -f "$probe"; then
  echo "aileron-check:workspace:ok"
else
  echo "aileron-check:workspace:fail"
fi
if found=$(command -v "$1" 2>/dev/null) && [ -n "$found" ]; then
  echo "aileron-check:agent:ok:$found"
else
  echo "aileron-check:agent:fail"
fi
if [ "$2" = 1 ]; then
  if found=$(command -v wget 2>/dev/null) && [ -n "$found" ]; then
    echo "aileron-check:wget:ok:$found"
  else
    echo "aileron-check:wget:fail"
  fi
fi
`

// Check validates the runtime contract of an image in a throwaway container
// with no network: /bin/sh runs, the workspace target is writable,
// the agent command is on PATH, and wget exists when shims are mounted.
// err is for failures to run the check at all; failed validations are in
// the report (see CheckReport.Err).
func Check(ctx context.Context, rt runtime.Runtime, opts CheckOptions) (CheckReport, error) {
	rep, _, err := check(ctx, rt, opts)
	return rep, err
}

// checkOutput is what the check's run printed, and its exit status.
type checkOutput struct {
	stdout, stderr string
	code           int
}

// check is Check, also returning what the run printed (for probeUser).
// With probeUser, a failed run is reported as the user probe's failure,
// as when the probe ran alone first.
func check(ctx context.Context, rt runtime.Runtime, opts CheckOptions) (rep CheckReport, out checkOutput, err error) {
	rep = CheckReport{Image: opts.Image, Agent: opts.Agent}
	if opts.Image == "" {
		return rep, out, errors.New("checking the sandbox image: no image given")
	}
	if !isAgentCommand(opts.Agent) {
		return rep, out, fmt.Errorf("checking the sandbox image: agent command %q is not a command name or path (pass --agent=CMD, e.g. --agent=claude)", opts.Agent)
	}
	base := opts.BaseImage
	if base == "" {
		base = BaseImage("")
	}
	ws := &opts.Workspace
	if ws.Target == "" {
		ws.Target = WorkspacePath
	}
	if ws.Source == "" {
		dir, err := os.MkdirTemp("", "aileron-check-workspace-*")
		if err != nil {
			return rep, out, fmt.Errorf("checking the sandbox image: creating a workspace: %w", err)
		}
		defer os.RemoveAll(dir)
		// A throwaway directory: writable by whatever uid the image runs as.
		if err := os.Chmod(dir, 0o777); err != nil {
			return rep, out, fmt.Errorf("checking the sandbox image: creating a workspace: %w", err)
		}
		ws.Source = dir
	}
	wantWget := "0"
	if opts.Shims {
		wantWget = "1"
	}
	script := checkScript
	if opts.probeUser {
		script = probeUserScript + "\n" + checkScript
	}
	var stdout, stderr bytes.Buffer
	code, err := rt.Run(ctx, runtime.RunRequest{
		Image:      opts.Image,
		Entrypoint: "/bin/sh",
		Cmd:        []string{"-c", script, "aileron-check", opts.Agent, wantWget, ws.Target},
		Network:    "none",
		User:       opts.User,
		Workdir:    ws.Target,
		Mounts:     []runtime.Mount{{Source: ws.Source, Target: ws.Target}},
		Labels:     map[string]string{LabelManaged: "true"},
		Stdout:     &stdout,
		Stderr:     &stderr,
	})
	if err != nil && opts.probeUser {
		return rep, out, probeUserError(opts.Image, opts.requestedUser, err)
	}
	if err != nil {
		return rep, out, fmt.Errorf("checking image %s: %w", opts.Image, err)
	}
	out = checkOutput{stdout: stdout.String(), stderr: stderr.String(), code: code}
	rep.Results = interpretCheck(out.stdout, out.stderr, code, opts, base)
	return rep, out, nil
}

// isAgentCommand reports whether s can be an agent command: not blank, not
// an option, and a single line.
func isAgentCommand(s string) bool {
	return strings.TrimSpace(s) != "" && !strings.HasPrefix(s, "-") && !strings.ContainsAny(s, "\x00\n")
}

// interpretCheck turns the script's marker lines into results; opts is
// Check's, with the workspace's target set.
func interpretCheck(stdout, stderr string, code int, opts CheckOptions, base string) []CheckResult {
	target := opts.Workspace.Target
	marks := map[string]string{}
	for _, line := range strings.Split(stdout, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimRight(line, "\r"), "aileron-check:")
		if !ok {
			continue
		}
		name, val, _ := strings.Cut(rest, ":")
		marks[name] = val
	}
	if marks[CheckShell] != "ok" {
		detail := fmt.Sprintf("/bin/sh did not run (container exit status %d)", code)
		if l := runtime.LastLines(stderr, 1); l != "" {
			detail += ": " + l
		}
		return []CheckResult{{
			Name: CheckShell, Detail: detail,
			Fix: fmt.Sprintf("the image needs a POSIX shell at /bin/sh: extend %s (or a Debian/Alpine image) instead of a shell-less one", base),
		}}
	}
	uid := marks["uid"]
	path := marks["path"]
	res := []CheckResult{{Name: CheckShell, OK: true, Detail: "/bin/sh runs"}}

	ws := CheckResult{Name: CheckWorkspace, OK: marks[CheckWorkspace] == "ok", Detail: target + " is writable"}
	if !ws.OK {
		ws.Detail = fmt.Sprintf("%s is not writable by the image's user (uid %s)", target, uid)
		ws.Fix = "run the image as a user that can write the mounted workspace (USER agent in the Dockerfile, uid 1000 as in " + base + ") and make sure the host directory grants that uid write access"
	}
	res = append(res, ws)

	agent := CheckResult{Name: CheckAgent}
	if v, ok := strings.CutPrefix(marks[CheckAgent], "ok:"); ok {
		agent.OK = true
		agent.Detail = fmt.Sprintf("%q resolves to %s", opts.Agent, v)
	} else {
		agent.Detail = fmt.Sprintf("agent command %q is not on PATH (PATH=%s)", opts.Agent, path)
		agent.Fix = fmt.Sprintf("install %q in .devcontainer/Dockerfile (see its commented snippets; `aileron-proxy sandbox init` writes one) and rebuild with `aileron-proxy sandbox build`, or pass --agent with a command the image has", opts.Agent)
	}
	res = append(res, agent)

	if opts.Shims {
		w := CheckResult{Name: CheckWget}
		if v, ok := strings.CutPrefix(marks[CheckWget], "ok:"); ok {
			w.OK = true
			w.Detail = "wget is " + v
		} else {
			w.Detail = "wget is not on PATH, and the connector shims call it"
			w.Fix = "install it in the Dockerfile (RUN apt-get update && apt-get install -y --no-install-recommends wget) or extend " + base
		}
		res = append(res, w)
	}
	return res
}
