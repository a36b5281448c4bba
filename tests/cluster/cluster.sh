#!/usr/bin/env bash
# A private Slurm cluster on this one machine, with the spares plugins loaded:
# one munged, one slurmctld and 32 slurmd's (node01..node32, a 4x4x2 torus,
# x fastest), all under one directory and on unusual ports, so it collides
# with nothing else on the machine.
#
#   tests/cluster/cluster.sh up       install what is missing, build the
#                                     plugins, start, wait until all nodes
#                                     are IDLE, print the `export` line
#   tests/cluster/cluster.sh down     stop exactly what `up` started
#                                     (recorded PIDs); safe in a trap
#   tests/cluster/cluster.sh status   the recorded daemons and sinfo
#   tests/cluster/cluster.sh env      print the `export SLURM_CONF=...` line
#   tests/cluster/cluster.sh policy   rewrite the policy file (see write_policy)
#   tests/cluster/cluster.sh sparesd  start sparesd again if it is not running
#                                     (same state directory: nothing is lost)
#   tests/cluster/cluster.sh exec CMD...  run CMD where the cluster's clients
#                                     work, with SLURM_CONF set (on the host:
#                                     directly; a release in a box: inside it)
#
# Another Slurm release: --slurm RELEASE (or SPARES_SLURM=RELEASE) before the
# command. 22.05 (the default) is the host's Slurm; 24.11 and 26.05 run the
# same cluster in a container of their own root filesystem (rootfs.sh,
# box.sh), with the plugins built from that release's headers
# (scripts/build-plugins.sh), default directory /tmp/spares-cluster-2411 or
# -2605. The box has its own network: the default ports never collide.
# What differs between releases lives in tests/cluster/releases.sh.
#
# Environment:
#   SPARES_CLUSTER_DIR   where everything lives (default /tmp/spares-cluster)
#   SPARES_CTLD_PORT     SlurmctldPort (default 26817); nodes use
#   SPARES_NODE_PORT     ... this port and the next 31 (default 27901)
#   SPARES_SKIP_BUILD=1  use the plugins already in target/release (a boxed
#                        release: in target/slurm-RELEASE)
#   SPARES_PLUGIN_BUILD_DIR  take spank_spares.so and job_submit_spares.so
#                        from this directory (a build of scripts/build-plugins.sh)
#   SPARES_PLUGIN_DIR    load spank_spares.so and job_submit_spares.so from
#                        this directory (e.g. the installed ones in Slurm's
#                        plugin directory) instead of building and copying
#                        them from the build tree
#   SPARES_BIN_DIR       take sparesd, sparesctl, sparesd-node-down and
#                        spares-free-nodes from
#                        here (default: the build tree, or the installed ones
#                        in PATH and /usr/lib/spares with SPARES_PLUGIN_DIR)
#   SPARES_SPARESD_CONFIG  sparesd's configuration file (--config); the
#                        command line still sets its socket, state and user
#   SPARES_START_SPARESD=0  start no sparesd and no node-down trigger (a
#                        test that runs its own daemon on the same socket)
#   SPARES_TORUS3D=1     26.05: let slurmctld load etc/topology.yaml, i.e.
#                        run topology/torus3d instead of topology/flat
#                        (placements 2x2x1 2x2x2 3x3x2 4x4x2; the policy
#                        reads that file: placement native)
#   SPARES_SLURM_DEBUG   SlurmctldDebug/SlurmdDebug (default debug, so the
#                        plugins' debug lines reach the logs)
#
# The spares site files live in $DIR/etc: spares.yaml (the policy, read by
# slurmctld through SPARES_POLICY and by the SPANK plugin through its
# plugstack.conf argument) and torus-4x4x2.yaml (from configs/). The
# free-node file $DIR/run/free-nodes is rewritten every second by
# spares-free-nodes (which also moves pending spares jobs off boxes that lost
# a node), started and stopped with the daemons.
#
# sparesd runs with the cluster: socket $DIR/run/sparesd.sock (the policy's
# sparesd_socket, so the SPANK plugin registers every job with spares), state
# in $DIR/state/sparesd, log $DIR/log/sparesd.out; a permanent strigger runs
# $DIR/bin/spares-node-down (sparesd-node-down on that socket) when a node
# goes down, so sparesd learns failures from Slurm too.
#
# Facts this relies on (Debian 12, Slurm 22.05.8): see
# shared/docs/slurm-on-one-machine.md.

set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
# shellcheck source=tests/cluster/releases.sh
. "$HERE/releases.sh"
if [[ ${1:-} == --slurm ]]; then
    SPARES_SLURM=${2:?--slurm needs a release}
    shift 2
fi
release_vars "${SPARES_SLURM:-22.05}"
export SPARES_SLURM=$RELEASE
if [[ $SUITE == host ]]; then
    DIR=${SPARES_CLUSTER_DIR:-/tmp/spares-cluster}
else
    DIR=${SPARES_CLUSTER_DIR:-/tmp/spares-cluster-$SPARES_RELEASE_TAG}
fi
CTLD_PORT=${SPARES_CTLD_PORT:-26817}
NODE_PORT=${SPARES_NODE_PORT:-27901}
DEBUG_LEVEL=${SPARES_SLURM_DEBUG:-debug}

# The torus: X x Y x Z nodes, node index = x + X*(y + Y*z) + 1.
TORUS_X=4 TORUS_Y=4 TORUS_Z=2
NNODES=$((TORUS_X * TORUS_Y * TORUS_Z))
NODES="node[01-$(printf %02d "$NNODES")]"
SECOND_NODES="node[$(printf %02d $((NNODES / 2 + 1)))-$(printf %02d "$NNODES")]"
NODE_PORTS="[$NODE_PORT-$((NODE_PORT + NNODES - 1))]"

CONF=$DIR/etc/slurm.conf
POLICY=$DIR/etc/spares.yaml
FREE_NODES=$DIR/run/free-nodes
PIDS=$DIR/run/pids          # one "name pid" line per daemon we started
MUNGE_SOCKET=$DIR/munge/munge.socket.2
PLUGINS=${SPARES_PLUGIN_DIR:-$DIR/plugins}
SPARESD_SOCKET=$DIR/run/sparesd.sock

log() { printf 'cluster: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

# ------------------------------------------------------------- packages

# Installs the Debian packages whose programs or files are missing (and only
# then), with one `apt-get update` before the first install.
ensure_packages() {
    # A box's root filesystem has them all (rootfs.sh) and no route to a mirror.
    [[ ${SPARES_INSIDE_BOX:-0} == 1 ]] && return
    local missing=()
    command -v slurmctld >/dev/null || missing+=(slurmctld)
    command -v slurmd >/dev/null || missing+=(slurmd)
    command -v sbatch >/dev/null || missing+=(slurm-client)
    command -v munged >/dev/null && command -v mungekey >/dev/null || missing+=(munge)
    [[ -e /usr/include/slurm/spank.h ]] || missing+=(libslurm-dev)
    # Optional for the build (slurm-sys falls back to checked-in bindings).
    compgen -G '/usr/lib/llvm-*/lib/libclang.so' >/dev/null || missing+=(libclang-dev)
    command -v cc >/dev/null || missing+=(gcc libc6-dev)
    if ((${#missing[@]})); then
        [[ $(id -u) == 0 ]] || die "missing packages (${missing[*]}) and not root"
        log "installing ${missing[*]}"
        apt-get update -q
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
    fi
}

# Slurm's own plugin directory (the one with select_linear.so).
slurm_plugin_dir() {
    local d
    for d in /usr/lib/*/slurm-wlm /usr/lib/slurm-wlm /usr/lib64/slurm /usr/lib/slurm; do
        [[ -e $d/select_linear.so ]] && { echo "$d"; return; }
    done
    die "cannot find Slurm's plugin directory (select_linear.so)"
}

# ------------------------------------------------------------- build

build_plugins() {
    if [[ -n ${SPARES_PLUGIN_DIR:-} ]]; then
        [[ -e $PLUGINS/spank_spares.so && -e $PLUGINS/job_submit_spares.so ]] ||
            die "no spank_spares.so and job_submit_spares.so in SPARES_PLUGIN_DIR=$PLUGINS"
        log "using the plugins in $PLUGINS"
        install_daemon_binaries ""
        return
    fi
    if [[ -n ${SPARES_PLUGIN_BUILD_DIR:-} ]]; then
        local built=$SPARES_PLUGIN_BUILD_DIR
        [[ -e $built/spank_spares.so && -e $built/job_submit_spares.so ]] ||
            die "no spank_spares.so and job_submit_spares.so in SPARES_PLUGIN_BUILD_DIR=$built"
        install -m 0755 "$built/spank_spares.so" "$DIR/plugins/spank_spares.so"
        install -m 0755 "$built/job_submit_spares.so" "$DIR/plugins/job_submit_spares.so"
        install_daemon_binaries "${CARGO_TARGET_DIR:-$ROOT/target}/release"
        return
    fi
    if [[ ${SPARES_SKIP_BUILD:-0} != 1 ]]; then
        log "building the plugins (cargo build --release)"
        (cd "$ROOT" && cargo build --release -q -p spank_spares -p job_submit_spares -p sparesd -p spares-client -p spares-freenodes)
    fi
    local target=${CARGO_TARGET_DIR:-$ROOT/target}/release
    [[ -e $target/libspank_spares.so && -e $target/libjob_submit_spares.so ]] ||
        die "plugins not built in $target"
    # Slurm finds a job_submit plugin as <PluginDir>/job_submit_<name>.so;
    # the SPANK plugin is named by its path in plugstack.conf. Copies, so a
    # rebuild while the cluster runs does not change a loaded library.
    install -m 0755 "$target/libspank_spares.so" "$DIR/plugins/spank_spares.so"
    install -m 0755 "$target/libjob_submit_spares.so" "$DIR/plugins/job_submit_spares.so"
    install_daemon_binaries "$target"
}

# sparesd, sparesctl, sparesd-node-down and spares-free-nodes into $DIR/bin: from SPARES_BIN_DIR if set, else
# from the build tree ($1), or from an installation (PATH, /usr/lib/spares) when the plugins
# are the installed ones (SPARES_PLUGIN_DIR).
install_daemon_binaries() {
    local b src
    for b in sparesd sparesctl sparesd-node-down spares-free-nodes; do
        if [[ -n ${SPARES_BIN_DIR:-} ]]; then
            src=$SPARES_BIN_DIR/$b
        elif [[ -n ${1:-} ]]; then
            src=$1/$b
        else
            src=$(PATH=$PATH:/usr/sbin:/usr/lib/spares command -v "$b" || true)
        fi
        [[ -n $src && -x $src ]] || die "no $b (looked for ${src:-it in PATH and /usr/lib/spares})"
        install -m 0755 "$src" "$DIR/bin/$b"
    done
    write_node_down_script
}

# slurmctld runs trigger programs with a bare environment: the socket is in the script.
write_node_down_script() {
    cat >"$DIR/bin/spares-node-down" <<EOF
#!/bin/sh
exec "$DIR/bin/sparesd-node-down" --socket "$SPARESD_SOCKET" "\$@" >>"$DIR/log/node-down.log" 2>&1
EOF
    chmod 0755 "$DIR/bin/spares-node-down"
}

# ------------------------------------------------------------- config

write_config() {
    local plugin_dir
    plugin_dir=$(slurm_plugin_dir)
    # Installed plugins live in Slurm's own directory: list it once.
    [[ $PLUGINS -ef $plugin_dir ]] || plugin_dir=$plugin_dir:$PLUGINS
    # topology/torus3d places sub-cubes only under select/cons_tres (select/linear hands
    # out nodes in name order); whole nodes per job, as select/linear gives.
    local SELECT_TYPE=select/linear PARTITION_EXTRA=""
    if [[ ${SPARES_TORUS3D:-0} == 1 ]]; then
        SELECT_TYPE=select/cons_tres PARTITION_EXTRA=" OverSubscribe=EXCLUSIVE"
    fi
    cat >"$CONF" <<EOF
# Generated by tests/cluster/cluster.sh: a private test cluster.
ClusterName=spares
SlurmctldHost=localhost
SlurmctldPort=$CTLD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$MUNGE_SOCKET
PluginDir=$plugin_dir
PlugStackConfig=$DIR/etc/plugstack.conf
JobSubmitPlugins=spares
# The SPANK plugin writes the job's map and registers it in the job prolog, at allocation.
PrologFlags=Alloc
StateSaveLocation=$DIR/state
SlurmctldPidFile=$DIR/run/slurmctld.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmctldDebug=$DEBUG_LEVEL
SlurmdSpoolDir=$DIR/spool/%n
# Per node: srun --mpi=pmix makes TmpFS/spmix_appdir_<uid>_<job>.<step> on every node, and
# one shared /tmp makes all but the first node's step fail (File exists).
TmpFS=$DIR/tmp/%n
SlurmdPidFile=$DIR/run/slurmd-%n.pid
SlurmdLogFile=$DIR/log/slurmd-%n.log
SlurmdDebug=$DEBUG_LEVEL
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=$SELECT_TYPE
MpiDefault=none
ReturnToService=1
# No message forwarding between slurmd's: on 24.11 a killed slurmd took nodes it relayed
# messages for DOWN with it (node11 killed: node13, node16, node32 DOWN, the job lost).
TreeWidth=65533
SlurmdTimeout=$SLURMD_TIMEOUT
MessageTimeout=3
# srun --kill-on-bad-exit ends a step with SIGTERM, KillWait, SIGKILL; from 24.11 slurmstepd
# holds a lock through the wait that REQUEST_TERMINATE_TASKS needs, so slurmd answers
# slurmctld only after KillWait: over MessageTimeout the node is "not responding", and over
# SlurmdTimeout DOWN (the batch node included, and the job with it).
KillWait=1
# A ${TORUS_X}x${TORUS_Y}x${TORUS_Z} torus, x fastest: node01..node04 are (0..3,0,0).
NodeName=$NODES NodeAddr=127.0.0.1 Port=$NODE_PORTS CPUs=2 Sockets=1 CoresPerSocket=2 ThreadsPerCore=1 RealMemory=1000 State=UNKNOWN
PartitionName=torus Nodes=$NODES Default=YES MaxTime=INFINITE State=UP$PARTITION_EXTRA
# A second partition over the upper half (node17..node32 on 4x4x2), for partitions.sh.
PartitionName=second Nodes=$SECOND_NODES MaxTime=INFINITE State=UP$PARTITION_EXTRA
EOF
    # In a box there is no cgroup file system (slurmd: "No filesystem
    # mounted on /sys/fs/cgroup"); releases.sh says which releases run boxed.
    if [[ $SUITE != host ]]; then
        echo "CgroupPlugin=disabled" >"$DIR/etc/cgroup.conf"
    else
        rm -f "$DIR/etc/cgroup.conf" # a box's, from an earlier run in the same directory
    fi
    cat >"$DIR/etc/plugstack.conf" <<EOF
# Generated by tests/cluster/cluster.sh.
required $PLUGINS/spank_spares.so policy=$POLICY
EOF
    install -m 0644 "$ROOT/configs/torus-4x4x2.yaml" "$DIR/etc/torus-4x4x2.yaml"
    write_policy "$POLICY"
    # The same torus in the topology.yaml format of Slurm's topology/torus3d
    # (ignored before 25.05; for the spares tools and tests). 26.05 loads a
    # topology.yaml next to slurm.conf and then places jobs by torus3d: only
    # with SPARES_TORUS3D=1, else the file has another name and Slurm's
    # default topology/flat runs.
    local topology_yaml=$DIR/etc/topology.yaml
    if [[ $SLURM_READS_TOPOLOGY_YAML == 1 && ${SPARES_TORUS3D:-0} != 1 ]]; then
        topology_yaml=$DIR/etc/torus3d-topology.yaml
    fi
    rm -f "$DIR/etc/topology.yaml"
    if [[ ${SPARES_TORUS3D:-0} == 1 ]]; then
        # topology/torus3d places jobs: Slurm's list format with placements (those of
        # shared/docs/slurm-releases.md; 3x3x2 wraps), which the policy reads too.
        cat >"$topology_yaml" <<EOF
- topology: torus
  cluster_default: true
  torus3d:
    toruses:
      - name: spares
        dims: {x: $TORUS_X, y: $TORUS_Y, z: $TORUS_Z}
        nodes: "$NODES"
        placements:
          - dims: {x: 2, y: 2, z: 1}
          - dims: {x: 2, y: 2, z: 2}
          - dims: {x: 3, y: 3, z: 2}
          - dims: {x: 4, y: 4, z: 2}
EOF
        return
    fi
    cat >"$topology_yaml" <<EOF
torus3d:
  toruses:
    - name: spares
      dims: {x: $TORUS_X, y: $TORUS_Y, z: $TORUS_Z}
      nodes: "$NODES"
EOF
}

# The test cluster's policy (configs/policy-spares.yaml explains each field).
# Tests change on_no_placement with SPARES_ON_NO_PLACEMENT=reject, and add lines with
# SPARES_POLICY_EXTRA (e.g. "max_unusable_nodes_at_start: 2").
# tests/cluster/cluster.sh policy (the plugins see the change at once).
write_policy() {
    local tmp=$1.new
    cat >"$tmp" <<EOF
# Generated by tests/cluster/cluster.sh.
topology: $([[ ${SPARES_TORUS3D:-0} == 1 ]] && echo topology.yaml || echo torus-4x4x2.yaml)
default_spares: none
allowed: ["3D(1,1)", "3D(2,1)", "3D(3,1)"]
auto:
  - {up_to_nodes: 4, spares: "3D(1,1)"}
  - {spares: "3D(2,1)"}
max_fraction: 0.6
on_no_placement: ${SPARES_ON_NO_PLACEMENT:-wait}
free_nodes_file: $FREE_NODES
state_dir: $DIR/state/spares
sparesd_socket: $SPARESD_SOCKET
${SPARES_POLICY_EXTRA:-}
EOF
    mv -f "$tmp" "$1"
}

# ------------------------------------------------------------- processes

# Starts "$@" in its own session with SLURM_CONF set, records its PID under
# name $1. Without job control a background child is no process-group leader,
# so setsid does not fork and $! is the daemon itself.
start() {
    local name=$1
    shift
    SLURM_CONF=$CONF SPARES_POLICY=$POLICY setsid "$@" >>"$DIR/log/$name.out" 2>&1 </dev/null &
    echo "$name $!" >>"$PIDS"
}

# Whether recorded PID $2 is still the daemon $1 we started (guards against
# a reused PID).
ours() {
    local prog=$1 pid=$2 cmd
    [[ -r /proc/$pid/cmdline ]] || return 1
    cmd=$(tr '\0' ' ' </proc/"$pid"/cmdline 2>/dev/null) || return 1
    [[ $cmd == *"$prog"* ]]
}

prog_of() { # name in $PIDS -> program
    case $1 in
        munged) echo munged ;;
        slurmctld) echo slurmctld ;;
        slurmd-*) echo "slurmd -D -N ${1#slurmd-}" ;;
        free-nodes) echo "spares-free-nodes" ;;
        sparesd) echo "sparesd --socket $SPARESD_SOCKET" ;;
    esac
}

running() { # any recorded daemon alive?
    [[ -s $PIDS ]] || return 1
    local name pid
    while read -r name pid; do
        ours "$(prog_of "$name")" "$pid" && return 0
    done <"$PIDS"
    return 1
}

wait_for() { # seconds, description, command...
    local secs=$1 what=$2
    shift 2
    local end=$((SECONDS + secs))
    until "$@" >/dev/null 2>&1; do
        ((SECONDS < end)) || die "timed out after ${secs}s waiting for $what (logs: $DIR/log)"
        sleep 0.2
    done
}

all_idle() {
    local n
    n=$(SLURM_CONF=$CONF sinfo -h -N -o '%N %t' 2>/dev/null | awk '$2 == "idle"' | sort -u | wc -l)
    ((n == NNODES))
}

start_munge() {
    mkdir -p "$DIR/munge"
    chmod 0711 "$DIR/munge"
    if [[ ! -s $DIR/munge/munge.key ]]; then
        mungekey --create --keyfile="$DIR/munge/munge.key"
    fi
    chmod 0400 "$DIR/munge/munge.key"
    start munged munged -F --socket="$MUNGE_SOCKET" --key-file="$DIR/munge/munge.key" \
        --pid-file="$DIR/run/munged.pid" --seed-file="$DIR/munge/munge.seed" \
        --log-file="$DIR/log/munged.log"
    wait_for 20 "munged" bash -c "munge -n --socket='$MUNGE_SOCKET' | unmunge --socket='$MUNGE_SOCKET'"
}

# sparesd on the cluster's socket and state directory (kept across restarts).
start_sparesd() {
    mkdir -p "$DIR/state/sparesd"
    # --config after --socket: the stop finds sparesd by "sparesd --socket <socket>".
    start sparesd "$DIR/bin/sparesd" --socket "$SPARESD_SOCKET" --state-dir "$DIR/state/sparesd" \
        --slurm-user root --log-level info --reconcile-interval-secs 30 \
        ${SPARES_SPARESD_CONFIG:+--config "$SPARES_SPARESD_CONFIG"}
    wait_for 20 "sparesd" "$DIR/bin/sparesctl" --socket "$SPARESD_SOCKET" health
}

sparesd_running() {
    local name pid
    [[ -s $PIDS ]] || return 1
    while read -r name pid; do
        [[ $name == sparesd ]] && ours "$(prog_of sparesd)" "$pid" && return 0
    done <"$PIDS"
    return 1
}

up() {
    if running; then
        log "already running in $DIR"
        print_env
        return
    fi
    ensure_packages
    # A fresh cluster each time: no logs, state or spool of an earlier run
    # (the tests read the logs). The munge key is kept.
    rm -rf "${DIR:?}"/{log,state,spool,run,tmp}
    mkdir -p "$DIR/state/spares"
    mkdir -p "$DIR"/{etc,plugins,bin,state,spool,run,log,tmp}
    build_plugins
    write_config

    # slurmctld exits on a job_submit plugin of another release: refuse it here,
    # with a message that says which package or build to use.
    "$ROOT/scripts/spares-plugin-check" --plugin "$PLUGINS/job_submit_spares.so" >&2 ||
        die "not starting slurmctld with $PLUGINS/job_submit_spares.so"

    start_munge
    # -c: cold start, no job or node state from an earlier run.
    start slurmctld slurmctld -D -c
    wait_for 30 "slurmctld" env SLURM_CONF="$CONF" scontrol ping
    if [[ ${SPARES_START_SPARESD:-1} == 1 ]]; then
        start_sparesd
        SLURM_CONF=$CONF strigger --set --node --down --flags=perm --program="$DIR/bin/spares-node-down" >/dev/null ||
            die "strigger --set failed"
    fi

    local i node
    for ((i = 1; i <= NNODES; i++)); do
        node=$(printf 'node%02d' "$i")
        mkdir -p "$DIR/spool/$node" "$DIR/tmp/$node"
        start "slurmd-$node" slurmd -D -N "$node"
    done
    wait_for 60 "all $NNODES nodes IDLE" all_idle
    rm -f "$FREE_NODES"
    start free-nodes "$DIR/bin/spares-free-nodes" --interval 1 --file "$FREE_NODES"
    wait_for 20 "the free-node file" test -s "$FREE_NODES"
    log "up: $NNODES nodes idle, slurmctld on port $CTLD_PORT, logs in $DIR/log"
    print_env
}

# Stops what `up` recorded: first the jobs (so slurmstepd's end), then the
# slurmd's, slurmctld and munged, by PID; TERM, then KILL after 10 s.
down() {
    if [[ ! -s $PIDS ]]; then
        log "nothing recorded in $PIDS"
        return 0
    fi
    if running && SLURM_CONF=$CONF scontrol ping >/dev/null 2>&1; then
        SLURM_CONF=$CONF scancel --quiet --user="$(id -un)" 2>/dev/null || true
        local end=$((SECONDS + 10))
        while ((SECONDS < end)) &&
            [[ -n $(SLURM_CONF=$CONF squeue -h -o %i 2>/dev/null) ]]; do
            sleep 0.3
        done
    fi
    local name pid pids=()
    while read -r name pid; do
        if ours "$(prog_of "$name")" "$pid"; then
            kill -TERM "$pid" 2>/dev/null && pids+=("$pid")
        fi
    done < <(tac "$PIDS") # slurmd's first, munged last
    local end=$((SECONDS + 10)) left
    while :; do
        left=()
        for pid in "${pids[@]}"; do
            [[ -e /proc/$pid ]] && left+=("$pid")
        done
        ((${#left[@]} == 0)) && break
        if ((SECONDS >= end)); then
            log "killing ${left[*]}"
            kill -KILL "${left[@]}" 2>/dev/null || true
            break
        fi
        sleep 0.2
    done
    # Steps of this cluster that outlived their slurmd (started by it, and
    # found by this cluster's SLURM_CONF in their environment).
    local p
    for p in $(pgrep -x slurmstepd || true); do
        if tr '\0' '\n' 2>/dev/null </proc/"$p"/environ | grep -qx "SLURM_CONF=$CONF"; then
            kill -KILL "$p" 2>/dev/null || true
        fi
    done
    : >"$PIDS"
    log "down (${#pids[@]} daemons stopped)"
}

status() {
    if [[ ! -s $PIDS ]]; then
        echo "not running (nothing recorded in $PIDS)"
        return 1
    fi
    local name pid alive=0 dead=0
    while read -r name pid; do
        if ours "$(prog_of "$name")" "$pid"; then
            alive=$((alive + 1))
        else
            dead=$((dead + 1))
            echo "$name ($pid): not running"
        fi
    done <"$PIDS"
    echo "$alive daemons running, $dead gone (dir $DIR)"
    SLURM_CONF=$CONF sinfo 2>&1 || true
    ((dead == 0))
}

print_env() {
    echo "export SLURM_CONF=$CONF SPARES_SOCKET=$SPARESD_SOCKET"
}

# ------------------------------------------------------------- a release in a box
# On the host, for a release that runs in a box: build for it, start the box,
# and run this script inside it (SPARES_INSIDE_BOX=1) for the cluster itself.
box() { "$HERE/box.sh" "$RELEASE" "$DIR" "$@"; }
inside() { box exec env SPARES_INSIDE_BOX=1 SPARES_CLUSTER_DIR="$DIR" "$HERE/cluster.sh" "$@"; }

boxed_up() {
    if box running && inside status >/dev/null 2>&1; then
        log "Slurm $RELEASE already running in its box ($DIR)"
        print_env
        return
    fi
    local target=${CARGO_TARGET_DIR:-$ROOT/target}
    if [[ ${SPARES_SKIP_BUILD:-0} != 1 && -z ${SPARES_PLUGIN_BUILD_DIR:-} ]]; then
        "$ROOT/scripts/build-plugins.sh" --slurm "$RELEASE"
        # The daemons do not use Slurm's headers: the host build serves every release.
        (cd "$ROOT" && cargo build --release -q -p sparesd -p spares-client -p spares-freenodes)
    fi
    mkdir -p "$DIR"
    box start
    SPARES_PLUGIN_BUILD_DIR=${SPARES_PLUGIN_BUILD_DIR:-$target/slurm-$RELEASE} inside up
}

boxed_down() {
    if box running; then
        inside down || true
        box stop
    else
        log "the Slurm $RELEASE box is not running ($DIR)"
    fi
}

if [[ $SUITE != host && ${SPARES_INSIDE_BOX:-0} != 1 ]]; then
    case ${1:-} in
        up) boxed_up ;;
        down) boxed_down ;;
        status | policy | sparesd) inside "$1" ;;
        env) print_env ;;
        exec)
            shift
            SLURM_CONF=$CONF box exec "$@"
            ;;
        *)
            echo "usage: $0 [--slurm RELEASE] up|down|status|env|policy|sparesd|exec CMD..." >&2
            exit 2
            ;;
    esac
    exit
fi

case ${1:-} in
    up) up ;;
    down) down ;;
    status) status ;;
    env) print_env ;;
    policy) write_policy "$POLICY" ;;
    exec)
        shift
        SLURM_CONF=$CONF exec "$@"
        ;;
    sparesd)
        if sparesd_running; then
            log "sparesd is running"
        else
            start_sparesd
            log "sparesd started on $SPARESD_SOCKET"
        fi
        ;;
    *)
        echo "usage: $0 [--slurm RELEASE] up|down|status|env|policy|sparesd|exec CMD..." >&2
        exit 2
        ;;
esac
