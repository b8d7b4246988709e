#!/usr/bin/env bash
# Sets up Docker and Podman for the launcher's real-container tests on a fresh
# Debian bookworm CI machine (run as root). CI reaches no container registry,
# so the base layer debian:bookworm-slim is made locally with debootstrap from
# the configured apt mirror and imported into both runtimes; the project's
# Dockerfiles then build unchanged (their apt-get runs reach the mirror through
# the runtimes' default bridge networks).
#
# Idempotent: packages, daemon, config and images already in place are kept.
# Prints what it did; exits non-zero with the reason on any failure.
# Environment: AILERON_CI_CACHE (default /var/cache/aileron-ci) holds the
# rootfs tarball between runs; AILERON_CI_MIRROR overrides the apt mirror.
set -euo pipefail

log() { printf '[containers] %s\n' "$*"; }
die() { printf '[containers] error: %s\n' "$*" >&2; exit 1; }
step_start() { STEP_T0=$(date +%s.%N); }
step_done() { log "$1 ($(awk -v a="$STEP_T0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1fs", b-a}'))"; }

[ "$(id -u)" -eq 0 ] || die "run as root (installs packages, starts dockerd, writes /etc/containers/containers.conf)"
CACHE=${AILERON_CI_CACHE:-/var/cache/aileron-ci}
BASE_REF=debian:bookworm-slim
export DEBIAN_FRONTEND=noninteractive

# --- packages -----------------------------------------------------------------
# netavark (and its aardvark-dns) is only a Recommends of podman: without it,
# --no-install-recommends picks the CNI plugins, whose internal networks put
# no gateway address on the host, so launch's relays would be unreachable.
pkgs=(docker.io podman runc netavark aardvark-dns debootstrap uidmap slirp4netns fuse-overlayfs iptables)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  step_start
  apt-get update -qq || die "apt-get update failed; is the Debian mirror reachable?"
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null \
    || die "installing ${missing[*]} failed"
  step_done "installed ${missing[*]}"
else
  log "packages present: ${pkgs[*]}"
fi

# --- dockerd ------------------------------------------------------------------
if docker info >/dev/null 2>&1; then
  log "dockerd already answering"
else
  step_start
  mkdir -p /var/log
  setsid dockerd >/var/log/aileron-ci-dockerd.log 2>&1 </dev/null &
  for _ in $(seq 1 120); do
    docker info >/dev/null 2>&1 && break
    sleep 0.5
  done
  docker info >/dev/null 2>&1 || {
    tail -n 20 /var/log/aileron-ci-dockerd.log >&2 || true
    die "dockerd did not answer within 60s (log: /var/log/aileron-ci-dockerd.log)"
  }
  step_done "started dockerd (log /var/log/aileron-ci-dockerd.log)"
fi
log "docker: server $(docker info --format '{{.ServerVersion}}'), storage $(docker info --format '{{.Driver}}'), cgroup $(docker info --format '{{.CgroupVersion}}') via $(docker info --format '{{.CgroupDriver}}'), client $(command -v docker)"

# --- podman: runc, netavark and ulimits the host can grant --------------------
# Podman's default nofile (1048576) exceeds what this machine lets even root
# raise to, and runc then fails with "error setting rlimit ... operation not
# permitted". Pin both limits to values the host grants: nofile = the hard
# limit; nproc = the hard limit capped at kernel.pid_max (podman caps its own
# nproc there), falling back to lower values if a probe run still fails.
conf=/etc/containers/containers.conf
nofile=$(ulimit -Hn); [ "$nofile" = unlimited ] && nofile=1048576
nproc=$(ulimit -Hu); [ "$nproc" = unlimited ] && nproc=1048576
pidmax=$(cat /proc/sys/kernel/pid_max 2>/dev/null || echo 32768)
[ "$nproc" -gt "$pidmax" ] && nproc=$pidmax
write_conf() {
  mkdir -p /etc/containers
  cat >"$conf.tmp" <<EOF
# Written by aileron-proxy .ci/containers.sh: CI machine settings, not product config.
[containers]
default_ulimits = ["nofile=$1:$1", "nproc=$2:$2"]

[engine]
runtime = "runc"

[network]
network_backend = "netavark"
EOF
  mv "$conf.tmp" "$conf"
}
write_conf "$nofile" "$nproc"
log "podman: $conf: runtime runc, network backend netavark, nofile $nofile, nproc $nproc"

# --- base layer: debootstrap once, import into both runtimes ------------------
mirror=${AILERON_CI_MIRROR:-}
if [ -z "$mirror" ]; then
  mirror=$(awk '/^URIs:/ && $2 ~ /\/debian\/?$/ {print $2; exit}' /etc/apt/sources.list.d/*.sources 2>/dev/null || true)
fi
if [ -z "$mirror" ]; then
  mirror=$(awk '$1=="deb" && $2 ~ /\/debian\/?$/ {print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
fi
mirror=${mirror:-http://deb.debian.org/debian}

tarball=$CACHE/bookworm-minbase.tar
have_docker_base=0; docker image inspect "$BASE_REF" >/dev/null 2>&1 && have_docker_base=1
have_podman_base=0; podman image exists "$BASE_REF" 2>/dev/null && have_podman_base=1
if [ ! -s "$tarball" ] && { [ $have_docker_base = 0 ] || [ $have_podman_base = 0 ]; }; then
  step_start
  mkdir -p "$CACHE"
  rootfs=$(mktemp -d "$CACHE/rootfs.XXXXXX")
  trap 'rm -rf "$rootfs"' EXIT
  debootstrap --variant=minbase bookworm "$rootfs" "$mirror" >"$CACHE/debootstrap.log" 2>&1 \
    || { tail -n 20 "$CACHE/debootstrap.log" >&2; die "debootstrap from $mirror failed (log $CACHE/debootstrap.log)"; }
  # Match the host's apt sources (the mirror CI can reach) and slim it down.
  if [ -f /etc/apt/sources.list.d/debian.sources ]; then
    cp /etc/apt/sources.list.d/debian.sources "$rootfs/etc/apt/sources.list.d/debian.sources"
    : >"$rootfs/etc/apt/sources.list"
  fi
  rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/* "$rootfs"/tmp/*
  tar -C "$rootfs" -cf "$tarball.tmp" . && mv "$tarball.tmp" "$tarball"
  rm -rf "$rootfs"; trap - EXIT
  step_done "debootstrapped bookworm minbase from $mirror into $tarball ($(du -h "$tarball" | cut -f1))"
fi
import_changes=(--change 'CMD ["bash"]' --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin')
if [ $have_docker_base = 0 ]; then
  step_start
  docker import "${import_changes[@]}" "$tarball" "$BASE_REF" >/dev/null || die "docker import of $tarball failed"
  step_done "imported $BASE_REF into docker"
else
  log "docker already has $BASE_REF"
fi
if [ $have_podman_base = 0 ]; then
  step_start
  podman import --quiet "${import_changes[@]}" "$tarball" "docker.io/library/$BASE_REF" >/dev/null || die "podman import of $tarball failed"
  step_done "imported $BASE_REF into podman"
else
  log "podman already has $BASE_REF"
fi

# --- smoke tests --------------------------------------------------------------
step_start
docker run --rm --network none "$BASE_REF" true || die "docker cannot run a container from $BASE_REF"
step_done "docker runs containers"
step_start
if ! podman run --rm --network none "$BASE_REF" true 2>/dev/null; then
  ok=0
  for n in 32768 4096 1024; do
    [ "$n" -lt "$nproc" ] || continue
    write_conf "$nofile" "$n"
    if podman run --rm --network none "$BASE_REF" true 2>/dev/null; then ok=1; nproc=$n; break; fi
  done
  [ $ok = 1 ] || { podman run --rm --network none "$BASE_REF" true || true; die "podman cannot run a container from $BASE_REF (see the error above; check $conf)"; }
  log "podman: lowered nproc to $nproc"
fi
backend=$(podman info --format '{{.Host.NetworkBackend}}')
[ "$backend" = netavark ] || die "podman uses the $backend network backend, want netavark (check $conf; a machine that ran podman with CNI needs \`podman system reset\`)"
step_done "podman runs containers (runtime $(podman info --format '{{.Host.OCIRuntime.Name}}'), network backend $backend)"

# Builds run apt-get inside containers on the default bridge: check that the
# mirror answers from there (a diagnostic: the build tests need it).
host=$(printf '%s' "$mirror" | sed -E 's#^[a-z]+://([^/:]+).*#\1#')
port=80; case $mirror in https://*) port=443 ;; esac
for rt in docker podman; do
  if "$rt" run --rm "$BASE_REF" timeout 10 bash -c "exec 3<>/dev/tcp/$host/$port" 2>/dev/null; then
    log "$rt: build containers reach $host:$port"
  else
    log "warning: $rt containers on the default network cannot reach $host:$port; Dockerfile apt-get steps will fail"
  fi
done

# Leftovers from interrupted runs.
docker network prune --force --filter label=dev.aileron.managed=true >/dev/null 2>&1 || true
for n in $(podman network ls --filter label=dev.aileron.managed=true --format '{{.Name}}' 2>/dev/null); do
  podman network rm --force "$n" >/dev/null 2>&1 || true
done
log "ready: docker and podman"
