#!/usr/bin/env bash
# Rehearses .ci/postgres (and optionally all of .ci/run) on a fresh Debian
# machine with no PostgreSQL installed: a minimal chroot of this machine's
# release, with this machine's Go toolchain, git, and a fresh clone of the
# repository. Run it by hand, as root, on a Debian machine (never from make
# test: it installs packages into the chroot and takes minutes):
#
#   scripts/fresh-machine-ci.sh [ROOT]        # default /var/tmp/fresh-root
#
# FRESH_FULL=1 runs the whole .ci/run in the chroot instead of only the
# PostgreSQL suites. The clone is of the repository this script is in, at
# its HEAD commit (FRESH_REF picks another): commit what you want rehearsed. The chroot runs in a network namespace of its own,
# so its loopback is its own: nothing of this machine's listens on its 5432,
# and the servers it starts are invisible here. Its only way out is a set of
# forwarders (socat, through unix sockets) to the package and module hosts,
# which its /etc/hosts names. At the end the chroot's PostgreSQL clusters are
# stopped, the forwarders ended and everything unmounted; ROOT is kept, and a
# second run reuses it (delete it to start from nothing).
set -euo pipefail
# Bash reads a script as it runs it: these braces make it read the whole
# script first, so that editing it (or checking out another commit) while
# a rehearsal runs cannot change or break that rehearsal.
{

root="${1:-/var/tmp/fresh-root}"
repo="$(cd "$(dirname "$0")/.." && pwd)"
gitdir="$(git -C "$repo" rev-parse --path-format=absolute --git-common-dir)"
ref="$(git -C "$repo" rev-parse "${FRESH_REF:-HEAD}")"
full="${FRESH_FULL:-0}"
# The hosts the chroot may reach, as host:port, each given a loopback
# address of its own inside the chroot's network namespace.
hosts=(deb.debian.org:80 proxy.golang.org:443 sum.golang.org:443 storage.googleapis.com:443)

# say prefixes each line with the seconds since the script started, so the
# log shows how long each phase took.
say() { echo "fresh-machine-ci [${SECONDS}s]: $*" >&2; }
die() { say "$*"; exit 1; }

[ "$(id -u)" = 0 ] || die "run it as root: it builds a chroot and mounts into it"
for c in apt-get git go unshare nsenter ip socat; do
  command -v "$c" >/dev/null 2>&1 || die "$c not found"
done
. /etc/os-release
release="${VERSION_CODENAME:?no VERSION_CODENAME in /etc/os-release}"
goroot="$(go env GOROOT)"
goproxy="$(go env GOPROXY)"
work="$(mktemp -d /var/tmp/fresh-machine-ci.XXXXXX)"
pids=()
mounts=()
holder=""

# in_root runs a shell command in the chroot, inside its network namespace
# once there is one, with a clean environment.
in_root() {
  local ns=()
  if [ -n "$holder" ]; then ns=(nsenter -t "$holder" -n); fi
  "${ns[@]}" chroot "$root" /usr/bin/env -i HOME=/root LANG=C.UTF-8 TERM=dumb \
    PATH=/usr/local/go/bin:/root/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    GOTOOLCHAIN=local GOFLAGS=-mod=mod GOPROXY="$goproxy" \
    bash -c "$1"
}

# stop_clusters stops every PostgreSQL server running in the chroot: the
# package's clusters and the private one .ci/postgres starts.
stop_clusters() {
  [ -x "$root/usr/bin/pg_lsclusters" ] && in_root 'pg_lsclusters -h | while read -r v c _; do pg_ctlcluster "$v" "$c" stop -m fast || true; done' || true
  in_root 'd=/var/tmp/leasehold-ci-pg; b=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
    if [ -n "$b" ] && [ -s "$d/postmaster.pid" ]; then runuser -u postgres -- "$b/pg_ctl" -D "$d" stop -m fast -w; fi' || true
}

cleanup() {
  local i p
  if [ -d "$root/proc/self" ]; then stop_clusters; fi
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for ((i = ${#mounts[@]} - 1; i >= 0; i--)); do umount -R "${mounts[i]}" || umount -R -l "${mounts[i]}" || true; done
  rm -rf "$work"
  say "cleaned up: clusters stopped, forwarders ended, nothing mounted under $root"
}
trap cleanup EXIT

mount_in() { # mount_in TARGET ARGS...: mount, and unmount at the end
  mkdir -p "$1"
  mount "${@:2}" "$1"
  mounts+=("$1")
  mount --make-rslave "$1"
}

make_root() {
  if [ ! -s "$root/etc/debian_version" ]; then
    command -v debootstrap >/dev/null 2>&1 ||
      { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap; }
    say "debootstrap --variant=minbase $release into $root"
    debootstrap --variant=minbase "$release" "$root" http://deb.debian.org/debian >"$work/debootstrap.log" ||
      { tail -20 "$work/debootstrap.log" >&2; die "debootstrap failed"; }
  fi
  mount_in "$root/proc" -t proc proc
  mount_in "$root/sys" --rbind /sys
  mount_in "$root/dev" --rbind /dev
  mount_in "$root/src.git" --bind -o ro "$gitdir"
  cp /etc/resolv.conf "$root/etc/resolv.conf"
  # Certificate authorities this machine added (a TLS-intercepting egress
  # proxy's, say) are needed in the chroot too, or no download verifies.
  mkdir -p "$root/usr/local/share/ca-certificates"
  cp -a /usr/local/share/ca-certificates/. "$root/usr/local/share/ca-certificates/"
  if [ ! -x "$root/usr/local/go/bin/go" ]; then
    say "copying the Go toolchain from $goroot"
    cp -a "$goroot" "$root/usr/local/go"
  fi
}

# isolate puts the chroot in a network namespace of its own with a
# forwarder to each of the hosts.
isolate() {
  local i=0 hp host port ip sock
  unshare -n sleep infinity &
  holder=$!
  pids+=("$holder")
  # Until unshare has made the namespace, the holder is still in this
  # machine's: wait for it to differ.
  for _ in $(seq 1 100); do
    [ "$(readlink "/proc/$holder/ns/net")" = "$(readlink /proc/self/ns/net)" ] || break
    sleep 0.05
  done
  [ "$(readlink "/proc/$holder/ns/net")" != "$(readlink /proc/self/ns/net)" ] || die "no network namespace for the chroot"
  nsenter -t "$holder" -n ip link set lo up
  grep -v '# fresh-machine-ci' "$root/etc/hosts" 2>/dev/null >"$work/hosts" || true
  printf '127.0.0.1 localhost\n::1 localhost ip6-localhost\n' >>"$work/hosts"
  for hp in "${hosts[@]}"; do
    i=$((i + 1))
    host="${hp%:*}" port="${hp#*:}" ip="127.0.2.$i" sock="$work/fwd$i.sock"
    socat "UNIX-LISTEN:$sock,fork" "TCP:$host:$port" &
    pids+=($!)
    nsenter -t "$holder" -n socat "TCP-LISTEN:$port,bind=$ip,fork,reuseaddr" "UNIX-CONNECT:$sock" &
    pids+=($!)
    echo "$ip $host # fresh-machine-ci" >>"$work/hosts"
  done
  sort -u "$work/hosts" >"$root/etc/hosts"
  for _ in $(seq 1 100); do
    [ "$(nsenter -t "$holder" -n ss -Hltn 'src 127.0.2.0/24' | wc -l)" = "${#hosts[@]}" ] && return
    sleep 0.05
  done
  die "the forwarders did not start"
}

# reset removes what an earlier run installed or started, so that every
# run begins with no PostgreSQL: no package, no cluster, nothing on 5432.
reset() {
  stop_clusters
  in_root 'if dpkg -l "postgresql*" 2>/dev/null | grep -q ^ii; then
      DEBIAN_FRONTEND=noninteractive apt-get purge -y -qq "postgresql*" libpq5 >/dev/null &&
      DEBIAN_FRONTEND=noninteractive apt-get autoremove --purge -y -qq >/dev/null; fi
    rm -rf /var/lib/postgresql /etc/postgresql /etc/postgresql-common /var/tmp/leasehold-ci-pg'
}

say "phase: the chroot in $root"
make_root
isolate
say "phase: git and certificates in the chroot"
in_root 'set -x; command -v git && command -v update-ca-certificates ||
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq git ca-certificates >/dev/null; }
  update-ca-certificates >/dev/null; go version'
say "phase: removing any PostgreSQL an earlier run installed"
reset
say "inside: no PostgreSQL installed, nothing listening on 5432"
in_root 'set -x; cat /etc/debian_version; ! dpkg -l "postgresql*" 2>/dev/null | grep ^ii; ! command -v psql
  if (exec 3<>/dev/tcp/127.0.0.1/5432) 2>/dev/null; then echo "something listens on 5432"; exit 1; fi'
say "phase: cloning $ref"
in_root 'set -x; rm -rf /root/leasehold && git clone -q /src.git /root/leasehold && git -C /root/leasehold checkout -q '"$ref"' && git -C /root/leasehold log --oneline -1'
if [ "$full" = 1 ]; then
  say "phase: .ci/run"
  in_root 'set -x; cd /root/leasehold && time .ci/run'
else
  say "phase: .ci/postgres and the PostgreSQL suites"
  in_root 'set -x; cd /root/leasehold && url="$(.ci/postgres)" && psql "$url" -Atc "SELECT version()" &&
    LEASEHOLD_TEST_POSTGRES="$url" CI=1 go test -count=1 -run Postgres ./queue ./sim'
fi
say "passed"
exit
}
