package launcher

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	"go.uber.org/zap"
)

func (r *cliRuntime) NetworkCreate(ctx context.Context, req NetworkRequest) (Network, error) {
	if req.Name == "" {
		return Network{}, fmt.Errorf("creating a network: no name given")
	}
	if req.Subnet == "" && req.DisableDNS && r.kind == RuntimePodman {
		return r.podmanCreatePicked(ctx, req)
	}
	if err := r.networkCreate(ctx, req); err != nil {
		return Network{}, err
	}
	return r.networkInspect(ctx, req.Name)
}

// networkCreate runs `network create` for req.
func (r *cliRuntime) networkCreate(ctx context.Context, req NetworkRequest) error {
	args := []string{"network", "create"}
	if req.Internal {
		args = append(args, "--internal")
	}
	if req.DisableDNS && r.kind == RuntimePodman {
		// Docker's embedded DNS does not forward for internal networks;
		// Podman's aardvark-dns does unless disabled.
		args = append(args, "--disable-dns")
	}
	if req.Subnet != "" {
		pfx, err := netip.ParsePrefix(req.Subnet)
		if err != nil || !pfx.Addr().Is4() || pfx.Bits() > 30 {
			return fmt.Errorf("creating network %s: subnet %q is not an IPv4 CIDR of /30 or wider", req.Name, req.Subnet)
		}
		pfx = pfx.Masked()
		args = append(args, "--subnet", pfx.String(), "--gateway", pfx.Addr().Next().String())
	}
	for _, k := range sortedKeys(req.Labels) {
		args = append(args, "--label", k+"="+req.Labels[k])
	}
	args = append(args, req.Name)
	if _, err := r.run(ctx, args...); err != nil {
		return fmt.Errorf("creating network %s: %w", req.Name, err)
	}
	return nil
}

// networkInspect reads the created network's subnet and gateway, removing
// the network when that fails.
func (r *cliRuntime) networkInspect(ctx context.Context, name string) (Network, error) {
	out, err := r.run(ctx, "network", "inspect", name)
	if err == nil {
		var n Network
		n, err = parseNetworkInspect(name, out)
		if err == nil {
			return n, nil
		}
	}
	if rmErr := r.NetworkRemove(ctx, name); rmErr != nil {
		r.log.Warn("removing network after a failed inspect", zap.String("network", name), zap.Error(rmErr))
	}
	return Network{}, fmt.Errorf("inspecting network %s: %w", name, err)
}

// podmanCreatePicked creates a Podman network on the first free
// 10.89.N.0/24 (N from 1): subnets of existing Podman networks are
// skipped, and a subnet Podman reports as used on the host is passed over.
func (r *cliRuntime) podmanCreatePicked(ctx context.Context, req NetworkRequest) (Network, error) {
	used := map[netip.Prefix]bool{}
	if out, err := r.run(ctx, "network", "ls", "--format", "json"); err == nil {
		var nets []struct{ Subnets []struct{ Subnet string } }
		if json.Unmarshal([]byte(out), &nets) == nil {
			for _, n := range nets {
				for _, s := range n.Subnets {
					if p, err := netip.ParsePrefix(s.Subnet); err == nil {
						used[p.Masked()] = true
					}
				}
			}
		}
	}
	const maxTries = 16
	tries := 0
	for i := 1; i < 255 && tries < maxTries; i++ {
		cand := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 89, byte(i), 0}), 24)
		if overlapsAny(used, cand) {
			continue
		}
		tries++
		req.Subnet = cand.String()
		err := r.networkCreate(ctx, req)
		var ce *cliError
		if errors.As(err, &ce) && strings.Contains(ce.stderr, "already used") {
			continue
		}
		if err != nil {
			return Network{}, err
		}
		return r.networkInspect(ctx, req.Name)
	}
	return Network{}, fmt.Errorf("creating network %s: no free subnet in 10.89.0.0/16 after %d tries (remove unused networks: podman network prune)", req.Name, tries)
}

func overlapsAny(used map[netip.Prefix]bool, p netip.Prefix) bool {
	for u := range used {
		if u.Overlaps(p) {
			return true
		}
	}
	return false
}

func (r *cliRuntime) NetworkRemove(ctx context.Context, name string) error {
	_, err := r.run(ctx, "network", "rm", name)
	if isNetworkGone(err) {
		return nil // already removed (by hand, or by an earlier teardown)
	}
	return wrapf(err, "removing network %s", name)
}

// isNetworkGone reports whether err is `network rm` saying the network does
// not exist: Docker's "network NAME not found", Podman's "unable to find
// network ...: network not found". Teardown must not retry those (it did,
// for its whole timeout, stalling serve's shutdown).
func isNetworkGone(err error) bool {
	var ce *cliError
	return errors.As(err, &ce) && strings.Contains(ce.stderr, "not found")
}

func (r *cliRuntime) ContainerRemove(ctx context.Context, name string) error {
	args := []string{"rm", "--force"}
	if r.kind == RuntimePodman {
		// Podman's rm --force still waits its default 10s stop timeout;
		// the container is being discarded, so do not wait.
		args = append(args, "--time", "0")
	}
	_, err := r.run(ctx, append(args, name)...)
	var ce *cliError
	if errors.As(err, &ce) && strings.Contains(strings.ToLower(ce.stderr), "no such container") {
		return nil
	}
	return wrapf(err, "removing container %s", name)
}

// parseNetworkInspect reads the first IPv4 subnet and gateway from
// `docker network inspect` (IPAM.Config) or `podman network inspect`
// (subnets) output.
func parseNetworkInspect(name, out string) (Network, error) {
	type subnet struct {
		Subnet, Gateway string
	}
	var nets []struct {
		IPAM struct {
			Config []subnet
		}
		Subnets []subnet
	}
	if err := json.Unmarshal([]byte(out), &nets); err != nil {
		return Network{}, fmt.Errorf("parsing network inspect output: %w", err)
	}
	if len(nets) != 1 {
		return Network{}, fmt.Errorf("network inspect returned %d networks, want 1", len(nets))
	}
	cands := append(nets[0].IPAM.Config, nets[0].Subnets...)
	for _, s := range cands {
		pfx, err := netip.ParsePrefix(s.Subnet)
		if err != nil || !pfx.Addr().Is4() {
			continue
		}
		gw, err := netip.ParseAddr(s.Gateway)
		if err != nil || !pfx.Contains(gw) {
			continue
		}
		return Network{Name: name, Subnet: pfx.String(), Gateway: gw.String()}, nil
	}
	return Network{}, fmt.Errorf("no IPv4 subnet with a gateway in the network inspect output")
}

func sortedKeys(m map[string]string) []string { return slices.Sorted(maps.Keys(m)) }

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	max int
	buf []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.buf = append(t.buf, p...)
	if len(t.buf) > t.max {
		t.buf = append([]byte(nil), t.buf[len(t.buf)-t.max:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string { return string(t.buf) }

// lastLines returns the last n non-empty lines of s.
func lastLines(s string, n int) string {
	var lines []string
	for _, l := range strings.Split(s, "\n") {
		if strings.TrimSpace(l) != "" {
			lines = append(lines, strings.TrimRight(l, "\r"))
		}
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func indent(s string) string {
	if s == "" {
		return ""
	}
	return "  " + strings.ReplaceAll(s, "\n", "\n  ")
}
