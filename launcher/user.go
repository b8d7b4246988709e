package launcher

import (
	"bytes"
	"context"
	"fmt"
	"github.com/aileron-dev/aileron-proxy/launcher/devcontainer"
	"github.com/aileron-dev/aileron-proxy/launcher/runtime"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// UIDImageRepository names the thin derived images that remap the image
// user's uid/gid to the project owner's; tags are
// <image ID, 12 hex>-<uid>-<gid>, so each is built once and reused.
const UIDImageRepository = "aileron/sandbox-uid"

// ImageUser is a user of an image, as the image resolves it.
type ImageUser struct {
	Name     string
	UID, GID int
}

// AgentUser is who the agent runs as, and in which image.
type AgentUser struct {
	// Image is the image to run: the plan's, or a derived one that remaps
	// the user.
	Image string
	// User is the --user value; empty keeps the image's USER.
	User string
	// UID and GID are the ids the agent gets.
	UID, GID int
	// Remap is true when Image is a derived image (updateRemoteUserUID).
	Remap bool
	// Summary says who the agent runs as and why, for the banner.
	Summary string
}

// decideUser chooses the agent's user from the project owner (ownerKnown
// false: not on Linux), the image user and the plan's
// updateRemoteUserUID, as the devcontainer CLI does: a non-root owner
// different from a non-root image user gets the image user remapped to
// its uid/gid; a root owner gets uid 0 (confined: every capability is
// dropped and no-new-privileges is set). It is pure.
func decideUser(ownerUID, ownerGID int, ownerKnown bool, img ImageUser, requested string, update bool) AgentUser {
	u := AgentUser{User: requested, UID: img.UID, GID: img.GID}
	who := fmt.Sprintf("%s (uid %d, gid %d)", img.Name, img.UID, img.GID)
	switch {
	case !ownerKnown:
		u.Summary = who + ", the image's user"
	case ownerUID == 0:
		u.User, u.UID, u.GID = "0:0", 0, 0
		u.Summary = "root (uid 0): the project is owned by root; every capability is dropped and no-new-privileges is set"
	case !update:
		u.Summary = who + ", the image's user (updateRemoteUserUID is false)"
	case img.UID == 0:
		u.Summary = who + ", the image's user (root is not remapped)"
	case img.UID == ownerUID && img.GID == ownerGID:
		u.Summary = who + ", the image's user, who owns the project"
	default:
		u.Remap, u.UID, u.GID = true, ownerUID, ownerGID
		u.Summary = fmt.Sprintf("%s remapped to uid %d, gid %d (the project owner's; updateRemoteUserUID)", img.Name, ownerUID, ownerGID)
	}
	return u
}

// ResolveAgentUser decides who the agent runs as for plan (see decideUser)
// and, when the image user must be remapped, builds (once per image ID and
// uid/gid) the thin derived image that does it. The image must be present.
func ResolveAgentUser(ctx context.Context, rt runtime.Runtime, plan *Plan, out io.Writer) (AgentUser, error) {
	image := plan.RunImage()
	img, err := probeImageUser(ctx, rt, image, plan.User)
	if err != nil {
		return AgentUser{}, err
	}
	return agentUserFor(ctx, rt, plan, img, out)
}

// agentUserFor is ResolveAgentUser once the image's user img is known.
func agentUserFor(ctx context.Context, rt runtime.Runtime, plan *Plan, img ImageUser, out io.Writer) (AgentUser, error) {
	image := plan.RunImage()
	uid, gid, known := ownerOf(plan.ProjectDir)
	u := decideUser(uid, gid, known, img, plan.User, plan.UpdateRemoteUserUID)
	u.Image = image
	if !u.Remap {
		return u, nil
	}
	id, err := rt.ImageID(ctx, image)
	if err != nil {
		return AgentUser{}, err
	}
	tag := fmt.Sprintf("%s:%s-%d-%d", UIDImageRepository, id[:min(12, len(id))], uid, gid)
	u.Image, u.User = tag, ""
	exists, err := rt.ImageExists(ctx, tag)
	if err != nil || exists {
		return u, err
	}
	return u, buildUIDImage(ctx, rt, image, tag, img.Name, uid, gid, out)
}

// probeUserScript prints the user a container runs as.
const probeUserScript = `echo "aileron-user:$(id -u):$(id -g):$(id -un 2>/dev/null || echo unknown)"`

// probeImageUser runs `id` in image as user (empty: the image's USER).
func probeImageUser(ctx context.Context, rt runtime.Runtime, image, user string) (ImageUser, error) {
	var stdout, stderr bytes.Buffer
	code, err := rt.Run(ctx, runtime.RunRequest{
		Image: image, Entrypoint: "/bin/sh", Cmd: []string{"-c", probeUserScript}, User: user,
		Network: "none", Labels: map[string]string{LabelManaged: "true"}, Stdout: &stdout, Stderr: &stderr,
	})
	if err == nil && code != 0 {
		err = fmt.Errorf("exit status %d: %s", code, runtime.LastLines(stderr.String(), 2))
	}
	if err != nil {
		return ImageUser{}, probeUserError(image, user, err)
	}
	return imageUserFrom(image, user, stdout.String(), stderr.String(), code)
}

// imageUserFrom reads probeUserScript's line from a run's output; without
// it, the error names the exit status and what the run printed.
func imageUserFrom(image, user, stdout, stderr string, code int) (ImageUser, error) {
	for _, line := range strings.Split(stdout, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "aileron-user:")
		if !ok {
			continue
		}
		f := strings.SplitN(rest, ":", 3)
		if len(f) == 3 {
			uid, err1 := strconv.Atoi(f[0])
			gid, err2 := strconv.Atoi(f[1])
			if err1 == nil && err2 == nil {
				return ImageUser{Name: f[2], UID: uid, GID: gid}, nil
			}
		}
	}
	if code != 0 {
		return ImageUser{}, probeUserError(image, user, fmt.Errorf("exit status %d: %s", code, runtime.LastLines(stderr, 2)))
	}
	return ImageUser{}, fmt.Errorf("finding the user of image %s: unexpected output %q", image, runtime.LastLines(stdout, 2))
}

// probeUserError is the error of a user probe of image as user that did
// not run.
func probeUserError(image, user string, err error) error {
	if user != "" {
		return fmt.Errorf("finding user %q in image %s: %w (check remoteUser/containerUser in %s)", user, image, err, devcontainer.Path)
	}
	return fmt.Errorf("finding the user of image %s: %w", image, err)
}

// uidDockerfile remaps REMOTE_USER to NEW_UID:NEW_GID (devcontainer
// updateRemoteUserUID): /etc/passwd and /etc/group are edited with awk
// (no usermod needed), the home directory is chowned. A uid taken by
// another user fails the build with the fix.
const uidDockerfile = `ARG BASE_IMAGE
FROM ${BASE_IMAGE}
ARG REMOTE_USER
ARG NEW_UID
ARG NEW_GID
USER root
RUN set -eu; \
  line=$(grep "^${REMOTE_USER}:" /etc/passwd) || { echo "aileron: user ${REMOTE_USER} is not in the image's /etc/passwd" >&2; exit 1; }; \
  old_gid=$(echo "$line" | cut -d: -f4); home=$(echo "$line" | cut -d: -f6); \
  taken=$(awk -F: -v u="$NEW_UID" -v n="$REMOTE_USER" '$3==u && $1!=n {print $1}' /etc/passwd); \
  if [ -n "$taken" ]; then echo "aileron: uid ${NEW_UID} belongs to ${taken} in the image: set remoteUser to ${taken}, or updateRemoteUserUID to false and make the project writable" >&2; exit 1; fi; \
  awk -F: -v OFS=: -v n="$REMOTE_USER" -v u="$NEW_UID" -v g="$NEW_GID" '$1==n {$3=u; $4=g} {print}' /etc/passwd > /tmp/aileron-passwd; \
  cat /tmp/aileron-passwd > /etc/passwd; \
  if ! awk -F: -v g="$NEW_GID" '$3==g {f=1} END {exit !f}' /etc/group; then \
    awk -F: -v OFS=: -v o="$old_gid" -v g="$NEW_GID" '$3==o {$3=g} {print}' /etc/group > /tmp/aileron-group; \
    cat /tmp/aileron-group > /etc/group; \
  fi; \
  rm -f /tmp/aileron-passwd /tmp/aileron-group; \
  if [ -d "$home" ]; then chown -R "${NEW_UID}:${NEW_GID}" "$home"; fi
USER ${REMOTE_USER}
`

// buildUIDImage builds tag FROM base with user remapped to uid:gid, with
// no network (nothing is downloaded).
func buildUIDImage(ctx context.Context, rt runtime.Runtime, base, tag, user string, uid, gid int, out io.Writer) error {
	dir, err := os.MkdirTemp("", "aileron-uid-*")
	if err != nil {
		return fmt.Errorf("remapping the image user: %w", err)
	}
	defer os.RemoveAll(dir)
	df := filepath.Join(dir, "Dockerfile")
	if err := os.WriteFile(df, []byte(uidDockerfile), 0o644); err != nil {
		return fmt.Errorf("remapping the image user: %w", err)
	}
	err = rt.Build(ctx, runtime.BuildRequest{
		Tag: tag, Dockerfile: df, Context: dir, Network: "none", Output: out,
		Args:   map[string]string{"BASE_IMAGE": base, "REMOTE_USER": user, "NEW_UID": strconv.Itoa(uid), "NEW_GID": strconv.Itoa(gid)},
		Labels: map[string]string{LabelManaged: "true"},
	})
	if err != nil {
		return fmt.Errorf("remapping user %s of %s to the project owner's uid %d, gid %d (set \"updateRemoteUserUID\": false in %s to keep the image user): %w", user, base, uid, gid, devcontainer.Path, err)
	}
	return nil
}

// checkAndProbeUser decides the agent's user and checks the image for
// it (ResolveAgentUser, then Check) in one run of the image where it can:
// the run that checks as the plan's user (root for a root-owned project)
// also prints who that is. Only when the decision changes the user or the
// image (a remapped uid) does the check run again, as that user.
func checkAndProbeUser(ctx context.Context, rt runtime.Runtime, plan *Plan, opts CheckOptions) (AgentUser, CheckReport, error) {
	opts.Image, opts.User, opts.probeUser, opts.requestedUser = plan.RunImage(), plan.User, true, plan.User
	if uid, _, ok := ownerOf(plan.ProjectDir); ok && uid == 0 {
		// A root-owned project runs the agent as root whoever the image's
		// user is (decideUser), so check as root from the start.
		opts.User = "0:0"
	}
	rep, out, err := check(ctx, rt, opts)
	if err != nil {
		return AgentUser{}, rep, err
	}
	img, err := imageUserFrom(opts.Image, plan.User, out.stdout, out.stderr, out.code)
	if err != nil {
		return AgentUser{}, rep, err
	}
	user, err := agentUserFor(ctx, rt, plan, img, nil)
	if err != nil {
		return AgentUser{}, rep, err
	}
	if user.Image != opts.Image || user.User != opts.User {
		opts.Image, opts.User, opts.probeUser = user.Image, user.User, false
		rep, err = Check(ctx, rt, opts)
	}
	return user, rep, err
}
