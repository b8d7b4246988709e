package testkit

import (
	"context"
	"os/exec"
	"slices"
	"strings"
	"time"
)

// SweepImages notes the images Docker and Podman hold now and returns a
// function that removes every image added since under a repository
// starting with prefix (and the untagged layers those builds left), except
// the repositories in keep (a shared base image the next run reuses). It
// wraps a whole test run (internal/testkit/imagesweep), not one test
// binary: `go test ./...` runs packages side by side, and one binary must
// not remove an image another is still using. A runtime that is not
// installed or not running is skipped.
func SweepImages(prefix string, keep ...string) func() {
	before := map[string]map[string]bool{}
	for _, rt := range []string{"docker", "podman"} {
		if ids, ok := listImages(rt); ok {
			before[rt] = ids
		}
	}
	return func() {
		for rt, had := range before {
			now, ok := listImages(rt)
			if !ok {
				continue
			}
			var remove []string
			for ref := range now {
				if had[ref] {
					continue
				}
				repo, _, _ := strings.Cut(strings.TrimPrefix(ref, "localhost/"), ":")
				switch {
				case repo == "<none>":
					remove = append(remove, strings.TrimPrefix(ref, "<none>:<none>@"))
				case strings.HasPrefix(repo, prefix) && !slices.Contains(keep, repo):
					remove = append(remove, ref)
				}
			}
			if len(remove) == 0 {
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			_ = exec.CommandContext(ctx, rt, append([]string{"rmi", "--force"}, remove...)...).Run()
			cancel()
		}
	}
}

// listImages returns rt's images as "repo:tag", untagged ones as
// "<none>:<none>@ID".
func listImages(rt string) (map[string]bool, bool) {
	if _, err := exec.LookPath(rt); err != nil {
		return nil, false
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, rt, "images", "--no-trunc", "--format", "{{.Repository}}:{{.Tag}} {{.ID}}").Output()
	if err != nil {
		return nil, false
	}
	ids := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		ref, id, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		if ref == "<none>:<none>" {
			ref += "@" + id
		}
		ids[ref] = true
	}
	return ids, true
}
