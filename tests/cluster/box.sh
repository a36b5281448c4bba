#!/usr/bin/env bash
# A container for one Slurm release's test cluster, without a Docker engine: the release's root
# filesystem (tests/cluster/rootfs.sh) in its own mount, PID, UTS, IPC and network namespaces
# (`unshare` + `chroot`; starts in about 0.1 s), or with SPARES_CONTAINER=podman a podman
# container of the same tree (runc; not the default: podman is not on the machines this was
# written on, and its default runtime crun fails there).
#
#   tests/cluster/box.sh RELEASE DIR start     start the box (idempotent)
#   tests/cluster/box.sh RELEASE DIR stop      stop it: everything in it dies with its init
#   tests/cluster/box.sh RELEASE DIR running   exit 0 if it runs
#   tests/cluster/box.sh RELEASE DIR exec CMD...  run CMD in the box, in the current directory
#                                              and environment (paths are the same inside)
#
# SPARES_BOX_TREE=DIR starts the box on that tree instead of the release's cached one.
# DIR is the cluster directory: the box records itself in DIR/box and sees DIR at the same path,
# read-write; the repository (with its build output) is at the same path, read-only.
# What Slurm needs inside (shared/docs/slurm-releases.md): a non-loopback address (a veth pair,
# both ends inside: the kernel has no dummy driver), the box's hostname in /etc/hosts, and no
# cgroup file system (cluster.sh writes CgroupPlugin=disabled).
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
# shellcheck source=tests/cluster/releases.sh
. "$HERE/releases.sh"

log() { printf 'box: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

# ------------------------------------------------------------- inside (PID 1 of the box)
# Runs in the new namespaces, still on the host's file system: network, hostname, mounts,
# then chroot into the release's tree, where it stays as init (reaping orphans).
if [[ ${1:-} == --inside ]]; then
    tree=$2 dir=$3 repo=$4 target=$5 name=$6
    hostname "$name"
    ip link set lo up
    ip link add veth0 type veth peer name veth1
    ip addr add 10.211.0.1/24 dev veth0
    ip link set veth0 up
    ip link set veth1 up
    mount --make-rprivate /
    mount -t proc proc "$tree/proc"
    mount --rbind /dev "$tree/dev"
    mount -t tmpfs -o mode=1777 tmpfs "$tree/tmp"
    mount -t tmpfs tmpfs "$tree/run"
    mkdir -p "$tree/run/lock" "$tree/$dir" "$tree/$repo"
    mount --bind "$dir" "$tree/$dir"
    mount --bind "$repo" "$tree/$repo"
    mount -o remount,bind,ro "$tree/$repo"
    if [[ $target != "$repo"/* ]]; then
        mkdir -p "$tree/$target"
        mount --bind "$target" "$tree/$target"
        mount -o remount,bind,ro "$tree/$target"
    fi
    [[ -e $tree/etc/hosts ]] || : >"$tree/etc/hosts" # debootstrap makes none
    mount --bind "$dir/box/hosts" "$tree/etc/hosts"
    exec chroot "$tree" /bin/bash -c 'trap "exit 0" TERM; while :; do sleep 3600 & wait $!; done'
fi

[[ $# -ge 3 ]] || { sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
release_vars "$1"
DIR=$2
action=$3
shift 3
[[ $SUITE != host ]] || die "Slurm $RELEASE runs on the host, not in a box"
BOX=$DIR/box
NAME=spares-$SPARES_RELEASE_TAG
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
ENGINE=${SPARES_CONTAINER:-unshare}

box_pid() { cat "$BOX/pid" 2>/dev/null; }

# The recorded init is alive and is still our box (its root is the release's tree).
running() {
    local pid
    pid=$(box_pid) || return 1
    case $ENGINE in
        podman) podman container exists "$NAME" && [[ $(podman inspect -f '{{.State.Running}}' "$NAME") == true ]] ;;
        *) [[ -n $pid && -e /proc/$pid ]] && [[ $(readlink "/proc/$pid/root") == "$(cat "$BOX/tree")" ]] ;;
    esac
}

write_hosts() {
    mkdir -p "$BOX"
    printf '127.0.0.1\tlocalhost\n10.211.0.1\t%s\n' "$NAME" >"$BOX/hosts"
}

start() {
    if running; then
        log "Slurm $RELEASE box already running (init $(box_pid))"
        return
    fi
    local tree t0=$SECONDS
    # SPARES_BOX_TREE: a tree of the caller's (the install test's disposable copy).
    tree=${SPARES_BOX_TREE:-$("$HERE/rootfs.sh" "$RELEASE")}
    write_hosts
    echo "$tree" >"$BOX/tree"
    case $ENGINE in
        unshare)
            setsid unshare --mount --pid --uts --ipc --net --fork --propagation private \
                bash "$HERE/box.sh" --inside "$tree" "$DIR" "$ROOT" "$TARGET" "$NAME" \
                >>"$BOX/box.log" 2>&1 </dev/null &
            local outer=$! pid= end=$((SECONDS + 20))
            # The box's init is unshare's child; ready once it has chrooted.
            while ((SECONDS < end)); do
                pid=$(cat "/proc/$outer/task/$outer/children" 2>/dev/null | awk '{print $1}')
                [[ -n $pid && $(readlink "/proc/$pid/root" 2>/dev/null) == "$tree" ]] && break
                [[ -e /proc/$outer ]] || die "the box exited at start (log: $BOX/box.log)"
                sleep 0.05
            done
            [[ -n $pid && $(readlink "/proc/$pid/root" 2>/dev/null) == "$tree" ]] ||
                die "the box did not start in 20 s (log: $BOX/box.log)"
            echo "$pid" >"$BOX/pid"
            ;;
        podman)
            # Not run on the machine this was written on (no podman there). The facts doc
            # measured: crun fails (setrlimit, hybrid cgroups); runc with these ulimits works.
            local image=localhost/spares-slurm:$RELEASE
            if ! podman image exists "$image"; then
                tar -C "$tree" --numeric-owner -c . | podman import - "$image" >/dev/null
            fi
            podman rm -f "$NAME" >/dev/null 2>&1 || true
            podman run -d --name "$NAME" --hostname "$NAME" --runtime runc \
                --ulimit nofile=4096:4096 --ulimit nproc=4096:4096 --cap-add NET_ADMIN \
                --network none -v "$DIR:$DIR" -v "$ROOT:$ROOT:ro" -v "$TARGET:$TARGET:ro" \
                -v "$BOX/hosts:/etc/hosts:ro" "$image" /bin/bash -c \
                'ip link set lo up; ip link add veth0 type veth peer name veth1;
                 ip addr add 10.211.0.1/24 dev veth0; ip link set veth0 up; ip link set veth1 up;
                 trap "exit 0" TERM; while :; do sleep 3600 & wait $!; done' >"$BOX/pid"
            ;;
        *) die "SPARES_CONTAINER=$ENGINE: unshare or podman" ;;
    esac
    log "Slurm $RELEASE box $NAME started with $ENGINE in $((SECONDS - t0)) s"
}

stop() {
    if ! running; then
        rm -f "$BOX/pid"
        return 0
    fi
    case $ENGINE in
        podman) podman rm -f "$NAME" >/dev/null ;;
        *)
            local pid
            pid=$(box_pid)
            # Killing a PID namespace's init kills every process in it.
            kill -KILL "$pid"
            local end=$((SECONDS + 10))
            while [[ -e /proc/$pid ]] && ((SECONDS < end)); do sleep 0.05; done
            ;;
    esac
    rm -f "$BOX/pid"
    log "Slurm $RELEASE box stopped"
}

# The variables a command in the box needs from ours (podman exec starts from an empty
# environment; nsenter keeps ours whole).
env_args() {
    local v
    while IFS= read -r v; do
        printf -- '--env\0%s\0' "$v"
    done < <(compgen -e | grep -E '^(SLURM|SPARES|OMPI|HYDRA|PMI)_' || true)
}

exec_in() {
    running || die "the Slurm $RELEASE box is not running (tests/cluster/cluster.sh --slurm $RELEASE up)"
    local cwd=$PWD
    case $ENGINE in
        podman)
            local args=()
            mapfile -d '' args < <(env_args)
            exec podman exec -i -w "$cwd" "${args[@]}" "$NAME" "$@"
            ;;
        *)
            cd / # the box has no such directory until the command cds back
            PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
                exec nsenter --target "$(box_pid)" --mount --uts --ipc --net --pid --root --wd -- \
                /bin/bash -c 'cd "$1" 2>/dev/null || cd /; shift; exec "$@"' box "$cwd" "$@"
            ;;
    esac
}

case $action in
    start) start ;;
    stop) stop ;;
    running) running ;;
    exec) exec_in "$@" ;;
    *) die "unknown action $action (start, stop, running, exec)" ;;
esac
