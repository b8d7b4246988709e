package launcher

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"sync"

	"github.com/aileron-dev/aileron-proxy/launcher/devcontainer"
	"github.com/aileron-dev/aileron-proxy/launcher/runtime"
)

// Refusal is nil when the plan refuses nothing, else an error listing each
// refused setting with its location, key and reason. Prepare and Launch
// call it first, so nothing is built or run for a refused plan.
func (p *Plan) Refusal() error {
	if len(p.Refused) == 0 {
		return nil
	}
	return &devcontainer.ConfigError{Path: p.DevContainer, Problems: p.Refused}
}

// lifecycleSteps returns the plan's in-sandbox steps with variables
// resolved by vc.
func (p *Plan) lifecycleSteps(vc devcontainer.VarContext) []devcontainer.LifecycleStep {
	out := make([]devcontainer.LifecycleStep, 0, len(p.Lifecycle))
	for _, s := range p.Lifecycle {
		r := devcontainer.LifecycleStep{Key: s.Key}
		for _, c := range s.Commands {
			r.Commands = append(r.Commands, c.Substitute(vc))
		}
		out = append(out, r)
	}
	return out
}

// RunInitializeCommand runs the plan's initializeCommand on the host, in
// the project directory, with this process's environment, output to out;
// localEnv resolves ${localEnv:...} (nil: os.LookupEnv). It returns an error naming the exit status when it fails. Only
// call it after the user allowed host commands (--allow-host-commands).
func RunInitializeCommand(ctx context.Context, p *Plan, localEnv func(string) (string, bool), out io.Writer) error {
	if p.InitializeCommand == nil {
		return nil
	}
	var wg sync.WaitGroup
	errs := make([]error, len(p.InitializeCommand.Commands))
	for i, c := range p.InitializeCommand.Commands {
		c = c.Substitute(p.Vars(localEnv, nil))
		fmt.Fprintf(out, "aileron: running initializeCommand on the host: %s\n", c)
		argv := c.Args
		if c.Shell != "" {
			argv = []string{"/bin/sh", "-c", c.Shell}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
			cmd.Dir, cmd.Stdout, cmd.Stderr, cmd.Env = p.ProjectDir, out, out, os.Environ()
			if err := cmd.Run(); err != nil {
				errs[i] = fmt.Errorf("initializeCommand %q failed on the host: %w (fix it in %s; nothing was started)", c.String(), err, devcontainer.Path)
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// HostCommandsRefusal is nil unless the plan has an initializeCommand and
// allowed is false; the error says why it is refused and how to allow it.
func (p *Plan) HostCommandsRefusal(allowed bool) error {
	if p.InitializeCommand == nil || allowed {
		return nil
	}
	return fmt.Errorf("%s: initializeCommand: refused: it runs on the host, outside the sandbox and its egress lock, with your user's access to files and credentials; review it and pass --allow-host-commands to run it, or remove it", p.DevContainer)
}

// planMounts resolves and checks the devcontainer's workspaceMount,
// workspaceFolder and mounts: a mount breaking a rule is refused (in
// p.Refused, naming the rule), a malformed one is an error.
func (p *Plan) planMounts(dc *devcontainer.DevContainer, opts PlanOptions) error {
	rules := opts.MountRules
	if rules == nil {
		home := opts.AileronHome
		if home == "" {
			home = os.Getenv("AILERON_HOME")
		}
		if home == "" {
			if h, err := os.UserHomeDir(); err == nil {
				home = filepath.Join(h, ".aileron")
			}
		}
		r := devcontainer.DefaultMountRules(home)
		rules = &r
	}
	withReserved := *rules
	withReserved.Reserved = reservedTargets
	rules = &withReserved
	var problems []devcontainer.ConfigProblem
	check := func(key string, m devcontainer.MountSpec, vc devcontainer.VarContext) (runtime.Mount, bool) {
		wsTarget := p.Workspace.Target
		if key == "workspaceMount" {
			wsTarget = ""
		}
		resolved, refusal, err := rules.CheckMount(m, vc, wsTarget)
		out := runtime.Mount(resolved)
		switch {
		case err != nil:
			problems = append(problems, devcontainer.ConfigProblem{Line: m.Line, Column: m.Column, Key: key, Message: err.Error()})
		case refusal != "":
			p.Refused = append(p.Refused, devcontainer.ConfigProblem{Line: m.Line, Column: m.Column, Key: key, Message: "refused: " + refusal})
		default:
			return out, true
		}
		return out, false
	}
	vc := p.Vars(opts.LocalEnv, nil)
	if dc.WorkspaceMount != nil {
		if dc.WorkspaceMount.Type != "bind" {
			problems = append(problems, devcontainer.ConfigProblem{Line: dc.WorkspaceMount.Line, Column: dc.WorkspaceMount.Column, Key: "workspaceMount", Message: "must be a bind mount of the project (type=bind)"})
		} else if ws, ok := check("workspaceMount", *dc.WorkspaceMount, vc); ok {
			p.Workspace, p.WorkspaceFolder = ws, ws.Target
		}
	}
	if dc.WorkspaceFolder != "" {
		f := path.Clean(devcontainer.Substitute(dc.WorkspaceFolder, p.Vars(opts.LocalEnv, nil)))
		if !path.IsAbs(f) {
			problems = append(problems, devcontainer.ConfigProblem{Key: "workspaceFolder", Message: fmt.Sprintf("%q must be an absolute path inside the sandbox", f)})
		}
		p.WorkspaceFolder = f
	}
	vc = p.Vars(opts.LocalEnv, nil)
	for _, m := range dc.Mounts {
		if out, ok := check("mounts", m, vc); ok {
			p.Mounts = append(p.Mounts, out)
		}
	}
	if len(problems) > 0 {
		return &devcontainer.ConfigError{Path: p.DevContainer, Problems: problems}
	}
	return nil
}

// reservedTargets are sandbox paths launch mounts itself.
var reservedTargets = []string{"/etc/aileron", "/opt/aileron", SandboxSystemBundle}

// Vars is the variable context of the plan's devcontainer; localEnv and
// containerEnv are as in VarContext.
func (p *Plan) Vars(localEnv, containerEnv func(string) (string, bool)) devcontainer.VarContext {
	return devcontainer.VarContext{
		LocalEnv: localEnv, ContainerEnv: containerEnv,
		LocalWorkspaceFolder: p.ProjectDir, ContainerWorkspaceFolder: p.WorkspaceFolder,
		DevContainerID: p.DevContainerID,
	}
}

// ResolveEnv resolves the plan's containerEnv (local variables only) and
// remoteEnv (also ${containerEnv:VAR}, looked up in imageEnv overlaid
// with the resolved containerEnv). localEnv nil means os.LookupEnv.
func (p *Plan) ResolveEnv(localEnv func(string) (string, bool), imageEnv map[string]string) (containerEnv, remoteEnv map[string]string) {
	containerEnv = devcontainer.SubstituteMap(p.ContainerEnv, p.Vars(localEnv, nil))
	inContainer := func(k string) (string, bool) {
		if v, ok := containerEnv[k]; ok {
			return v, true
		}
		v, ok := imageEnv[k]
		return v, ok
	}
	return containerEnv, devcontainer.SubstituteMap(p.RemoteEnv, p.Vars(localEnv, inContainer))
}

// NeedsContainerEnv reports whether remoteEnv or a lifecycle command
// refers to ${containerEnv:...},
// so launch must read the image's environment first.
func (p *Plan) NeedsContainerEnv() bool {
	for _, v := range p.RemoteEnv {
		if strings.Contains(v, "${containerEnv:") {
			return true
		}
	}
	for _, s := range p.Lifecycle {
		for _, c := range s.Commands {
			if strings.Contains(c.Shell+strings.Join(c.Args, " "), "${containerEnv:") {
				return true
			}
		}
	}
	return false
}
