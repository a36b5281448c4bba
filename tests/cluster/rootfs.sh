#!/usr/bin/env bash
# A Debian root filesystem per Slurm release, for the containerized test clusters
# (tests/cluster/box.sh runs it): debootstrap from Debian's archive, then Slurm, munge and what
# the tests use inside, cached as a zstd tarball so a second run only unpacks it.
#
#   tests/cluster/rootfs.sh RELEASE     make (or reuse) the root filesystem of RELEASE
#                                       (24.11 or 26.05); prints its directory on stdout
#   tests/cluster/rootfs.sh --clean RELEASE   remove the unpacked tree and the tarball
#
# Environment:
#   SPARES_CACHE_DIR   where tarballs and unpacked trees live (default /var/cache/spares-test)
#   SPARES_DEBIAN_MIRROR  (default http://deb.debian.org/debian)
#
# Idempotent: an unpacked tree whose stamp matches the recipe is used as it is; else the
# tarball of the same recipe is unpacked (about 2 s); else the tree is made from scratch
# (about a minute and a half) and packed. Each step prints what it cost on stderr.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=tests/cluster/releases.sh
. "$HERE/releases.sh"

CACHE=${SPARES_CACHE_DIR:-/var/cache/spares-test}
MIRROR=${SPARES_DEBIAN_MIRROR:-http://deb.debian.org/debian}

log() { printf 'rootfs: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

# Slurm and munge as on the host, plus what the tests run inside the box: jq (e2e), a C
# compiler for submit_spank_env.c, MPICH (mpi.sh), iproute2 and procps (the box's network,
# pgrep), zstd and dpkg-dev (packaging in the box).
PACKAGES="slurmctld slurmd slurm-client libslurm-dev munge libmunge2 jq gcc libc6-dev mpich libmpich-dev iproute2 procps"

# The recipe: whatever changes the tree. Its hash names the tarball, so a changed package list
# or suite makes a new one instead of reusing a stale one.
recipe() {
    printf '%s\n' "suite=$SUITE" "packages=$PACKAGES" "recipe=3"
}

mount_api() { # the kernel file systems apt and maintainer scripts want
    local root=$1
    mount -t proc proc "$root/proc"
    mount --bind /dev "$root/dev"
}

umount_api() {
    local root=$1
    umountq "$root/dev"
    umountq "$root/proc"
}

umountq() { mountpoint -q "$1" && umount -l "$1" || true; }

make_tree() {
    local root=$1 t0=$SECONDS
    command -v debootstrap >/dev/null || die "debootstrap is missing (scripts/setup.sh installs it)"
    rm -rf "$root.new"
    mkdir -p "$root.new"
    log "debootstrap $SUITE into $root.new (from $MIRROR)"
    debootstrap --variant=minbase --keyring=/usr/share/keyrings/debian-archive-keyring.gpg \
        "$SUITE" "$root.new" "$MIRROR" >"$CACHE/debootstrap-$RELEASE.log" 2>&1 ||
        die "debootstrap failed (log: $CACHE/debootstrap-$RELEASE.log)"
    log "debootstrap: $((SECONDS - t0)) s"
    # No service starts inside the chroot while packages install.
    printf '#!/bin/sh\nexit 101\n' >"$root.new/usr/sbin/policy-rc.d"
    chmod 0755 "$root.new/usr/sbin/policy-rc.d"
    # sid's Release file may be past its Valid-Until on the mirror.
    echo 'Acquire::Check-Valid-Until "false";' >"$root.new/etc/apt/apt.conf.d/99spares-no-valid-until"
    printf 'APT::Install-Recommends "false";\nAPT::Install-Suggests "false";\n' \
        >"$root.new/etc/apt/apt.conf.d/99spares-no-recommends"
    echo "deb $MIRROR $SUITE main" >"$root.new/etc/apt/sources.list"
    cp /etc/resolv.conf "$root.new/etc/resolv.conf" 2>/dev/null || true
    local t1=$SECONDS
    mount_api "$root.new"
    trap 'umount_api "$root.new"' EXIT
    # shellcheck disable=SC2086
    chroot "$root.new" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin DEBIAN_FRONTEND=noninteractive \
        sh -c "apt-get update -qq && apt-get install -y -qq $PACKAGES && apt-get clean" \
        >"$CACHE/apt-$RELEASE.log" 2>&1 || die "apt-get install in the $SUITE tree failed (log: $CACHE/apt-$RELEASE.log)"
    umount_api "$root.new"
    trap - EXIT
    rm -rf "$root.new"/var/lib/apt/lists/*_Packages "$root.new"/var/cache/apt/*.bin
    log "packages ($PACKAGES): $((SECONDS - t1)) s"
    local have
    have=$(chroot "$root.new" dpkg-query -W -f='${Version}' slurmctld)
    [[ $have == "$SLURM_DEB_PREFIX"* ]] ||
        die "the $SUITE archive has slurmctld $have, not $RELEASE (Debian moved on: update tests/cluster/releases.sh)"
    log "slurmctld $have"
}

case ${1:-} in
    --clean)
        release_vars "${2:-}"
        rm -rf "${CACHE:?}/root-$RELEASE" "$CACHE/root-$RELEASE.new" "$CACHE"/rootfs-"$RELEASE"-*.tar.zst
        exit 0
        ;;
    -h | --help | "")
        sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'
        exit 2
        ;;
esac
release_vars "$1"
[[ $(id -u) == 0 ]] || die "root is needed (debootstrap, chroot)"
mkdir -p "$CACHE"
exec 9>"$CACHE/rootfs-$RELEASE.lock"
flock 9 # two runs at once for one release: the second waits and then reuses

key=$(recipe | sha256sum | cut -c1-12)
tarball=$CACHE/rootfs-$RELEASE-$key.tar.zst
root=$CACHE/root-$RELEASE
start=$SECONDS

if [[ -f $root/.spares-rootfs && $(cat "$root/.spares-rootfs") == "$key" ]]; then
    log "$RELEASE: $root is current (recipe $key)"
elif [[ -s $tarball ]]; then
    rm -rf "$root"
    mkdir -p "$root"
    zstd -dc -T0 "$tarball" | tar -x -C "$root" --numeric-owner
    echo "$key" >"$root/.spares-rootfs"
    log "$RELEASE: unpacked $tarball in $((SECONDS - start)) s"
else
    make_tree "$root"
    t=$SECONDS
    tar -C "$root.new" --numeric-owner --one-file-system -c . | zstd -q -T0 -3 -o "$tarball.tmp" -f
    mv -f "$tarball.tmp" "$tarball"
    rm -f "$CACHE"/rootfs-"$RELEASE"-*.tar.zst.old
    for old in "$CACHE"/rootfs-"$RELEASE"-*.tar.zst; do
        [[ $old == "$tarball" ]] || rm -f "$old"
    done
    log "packed $(du -h "$tarball" | cut -f1) in $((SECONDS - t)) s"
    rm -rf "$root"
    mv "$root.new" "$root"
    echo "$key" >"$root/.spares-rootfs"
    log "$RELEASE: made from scratch in $((SECONDS - start)) s"
fi
echo "$root"
