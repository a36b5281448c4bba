# shellcheck shell=bash
# Shared by the cluster tests (smoke.sh, plugins.sh, e2e.sh, mpi.sh; sourced, not run): the
# Slurm release to test, the pass/fail tally, the refusal check, the job and free-node waits,
# the teardown, and the start-up.
#
#   . "$HERE/lib.sh"
#   spares_test_start "$0" "$@"     # after the test's own settings; see below
#   ... checks with pass / fail / check ...
#   finish                          # prints "N passed, M failed"; status 0 if none failed
#
# The release: --slurm RELEASE as the test's first arguments, or SPARES_SLURM (default 22.05,
# the host's Slurm). A release that runs in a box (tests/cluster/releases.sh) is started from
# the host (cluster.sh --slurm RELEASE up: its root filesystem, plugins built from its headers,
# the box), and then the whole test runs INSIDE the box, where sbatch, srun, scontrol, kill,
# pgrep and /proc are the cluster's own: the test bodies are the same for every release.
# Afterwards the host stops the cluster and the box.
#
# Sets: RELEASE, SUITE, DIR (the cluster directory, exported as SPARES_CLUSTER_DIR), CLUSTER
# (cluster.sh), SLURM_CONF (exported), and RESULT_PREFIX ("[24.11] " on other releases).

LIB_HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
LIB_ROOT=$(cd "$LIB_HERE/../.." && pwd)
# shellcheck source=tests/cluster/releases.sh
. "$LIB_HERE/releases.sh"

passed=0
failed=0
pass() {
    passed=$((passed + 1))
    printf 'PASS %s\n' "$1"
}
fail() {
    failed=$((failed + 1))
    printf 'FAIL %s\n' "$1"
    [[ -n ${2:-} ]] && printf '%s\n' "$2" | head -30 | sed 's/^/     | /'
}
check() { # description, command...: PASS if the command succeeds
    local what=$1
    shift
    if "$@"; then pass "$what"; else fail "$what"; fi
}
expect_refused() { # description, text, [--slurm TEXT], command...: PASS if the command fails,
    # prints the text (and Slurm's TEXT) and submits no job; PASS shows the line with the text
    local what=$1 want=$2 slurm="" out rc
    shift 2
    if [[ ${1:-} == --slurm ]]; then
        slurm=$2
        shift 2
    fi
    out=$("$@" 2>&1)
    rc=$?
    if ((rc != 0)) && grep -qF -- "$want" <<<"$out" && grep -qF -- "$slurm" <<<"$out" &&
        ! grep -q 'Submitted batch job' <<<"$out"; then
        pass "$what: $(grep -F -- "$want" <<<"$out" | head -1 | sed 's/^sbatch: error: //')"
    else
        fail "$what" "rc=$rc, want '$want'${slurm:+ and '$slurm'} in: $out"
    fi
}
finish() {
    echo "$passed passed, $failed failed"
    if ((failed == 0)); then
        finished_clean=1
    elif [[ -n ${WORK:-} ]]; then
        echo "the test's files are kept for inspection: $WORK"
    fi
    ((failed == 0))
}
teardown() {
    [[ ${SPARES_KEEP_CLUSTER:-0} == 1 ]] || "$CLUSTER" down
    # The test's work directory (WORK, in the cluster directory) goes with a run that reached
    # `finish` with every check passed; any other run keeps it. (Each run left one, 4 MB for
    # e2e.sh: 830 MB on the test machine by November 2026.)
    if [[ ${finished_clean:-0} == 1 && -n ${WORK:-} && -d $WORK ]]; then
        cd / && rm -rf "$WORK"
    fi
}

# The free-node file (spares-free-nodes writes version 2: hostlists with state= and
# partitions=; version 1 lists only the free nodes).
free_node_count() { # -> how many distinct nodes the free-node file lists as free
    free_nodes | sort -u | grep -c .
}
wait_free() { # node count: until the free-node file lists at least that many free (a job's
    # nodes come back once it is no longer COMPLETING, which a loaded machine can make slow)
    local end=$((SECONDS + 120))
    while (($(free_node_count) < $1)); do
        ((SECONDS < end)) || return 1
        sleep 0.3
    done
    # job_submit keeps the boxes it pinned as busy until a free-node file written 2 s after
    # the pin (slurm-plugin/common/src/place.rs, PIN_GRACE): a job that ended within 2 s of
    # its submission still holds its box for the next one.
    sleep 3
}
busy_on() { # job id, node: until the job runs and the free-node file lists the node as not
    # free (120 s at most; a job submitted while its nodes are still COMPLETING starts at
    # Slurm's next scheduling pass, up to a minute later); a FAIL if that never happens
    local end=$((SECONDS + 120))
    until [[ $(job_field "$1" JobState) == RUNNING ]] && ! lists_free "$2"; do
        if ((SECONDS >= end)); then
            fail "the job on $2 runs and the free-node file shows $2 busy" "$(scontrol show job -o "$1" 2>&1)"
            return 1
        fi
        sleep 0.3
    done
}
job_field() { # job id, field -> value
    scontrol show job -o "$1" 2>/dev/null | tr ' ' '\n' | sed -n "s/^$2=//p" | head -1
}
# A job's start may wait for Slurm's next scheduling pass (sched_interval, 60 s by default)
# when its nodes were still COMPLETING at submission: waits for a start or an end allow 120 s.
wait_job() { # job id, seconds -> final state, or TIMEOUT(state)
    local id=$1 end=$((SECONDS + $2)) state
    while :; do
        state=$(job_field "$id" JobState)
        case $state in
            PENDING | RUNNING | CONFIGURING | COMPLETING | "") ;;
            *) echo "$state"; return ;;
        esac
        ((SECONDS < end)) || { echo "TIMEOUT($state)"; return; }
        sleep 0.3
    done
}
wait_state() { # job id, state, seconds: until the job is in that state; status 1 if it never is
    local end=$((SECONDS + $3))
    while [[ $(job_field "$1" JobState) != "$2" ]]; do
        ((SECONDS < end)) || return 1
        sleep 0.3
    done
}
lists_free() { # node: whether the free-node file lists it as free
    free_nodes | grep -x "$1" >/dev/null # not -q: the writer must not die of SIGPIPE (pipefail)
}
# The nodes the free-node file ($DIR/run/free-nodes, format v2) calls free, one a line: lines
# with state=free or without state= (v1).
free_nodes() {
    local file=$DIR/run/free-nodes hosts rest
    [[ -r $file ]] || return 0
    while read -r hosts rest; do
        [[ -z $hosts || $hosts == \#* ]] && continue
        [[ " $rest " == *" state="* && " $rest " != *" state=free "* ]] && continue
        scontrol show hostnames "$hosts"
    done <"$file"
}

# Whether the free-node file gives node $1 the state $2 (free, busy, unusable), whatever
# the writer's grouping of hostlists.
listed_as() {
    local file=$DIR/run/free-nodes hosts rest
    [[ -r $file ]] || return 1
    while read -r hosts rest; do
        [[ -z $hosts || $hosts == \#* || " $rest " != *" state=$2 "* ]] && continue
        scontrol show hostnames "$hosts" | grep -x "$1" >/dev/null && return 0
    done <"$file"
    return 1
}

# The release and the cluster directory, from the test's arguments ("$0" "$@").
spares_test_release() {
    shift # the script
    if [[ ${1:-} == --slurm ]]; then
        SPARES_SLURM=${2:?--slurm needs a release}
    fi
    release_vars "${SPARES_SLURM:-22.05}" || exit 2
    export SPARES_SLURM=$RELEASE
    if [[ $SUITE == host ]]; then
        DIR=${SPARES_CLUSTER_DIR:-/tmp/spares-cluster}
    else
        DIR=${SPARES_CLUSTER_DIR:-/tmp/spares-cluster-$SPARES_RELEASE_TAG}
    fi
    export SPARES_CLUSTER_DIR=$DIR
    CLUSTER=$LIB_HERE/cluster.sh
    SLURM_CONF=$DIR/etc/slurm.conf
    export SLURM_CONF
}

# Starts the cluster (or, for a boxed release on the host, starts it and runs the test in the
# box, then exits with the test's status). Call with "$0" "$@"; SPARES_TEST_BUILD names the
# binaries the test needs (cargo packages), built on the host first unless SPARES_SKIP_BUILD=1.
spares_test_start() {
    local script=$1
    shift
    [[ ${1:-} == --slurm ]] && shift 2
    # Built on the host for every release: a boxed test runs the host's binaries.
    if [[ ${SPARES_INSIDE_BOX:-0} != 1 && ${SPARES_SKIP_BUILD:-0} != 1 && -n ${SPARES_TEST_BUILD:-} ]]; then
        local pkgs=() p
        for p in $SPARES_TEST_BUILD; do pkgs+=(-p "$p"); done
        (cd "$LIB_ROOT" && cargo build --release -q "${pkgs[@]}") ||
            { fail "[$RELEASE] cargo build --release ${pkgs[*]}"; finish; exit 1; }
    fi
    if [[ $SUITE != host && ${SPARES_INSIDE_BOX:-0} != 1 ]]; then
        if ! "$CLUSTER" up >/dev/null; then
            fail "[$RELEASE] cluster up" "see $DIR/log and $DIR/box"
            "$CLUSTER" down >/dev/null 2>&1
            finish
            exit 1
        fi
        local rc=0
        "$CLUSTER" exec env SPARES_INSIDE_BOX=1 SPARES_SKIP_BUILD=1 SPARES_KEEP_CLUSTER=1 \
            SPARES_PLUGIN_BUILD_DIR="${CARGO_TARGET_DIR:-$LIB_ROOT/target}/slurm-$RELEASE" \
            bash "$script" "$@" || rc=$?
        [[ ${SPARES_KEEP_CLUSTER:-0} == 1 ]] || "$CLUSTER" down
        exit "$rc"
    fi
    trap teardown EXIT
    trap 'exit 130' INT TERM
    if ! "$CLUSTER" up >/dev/null; then
        fail "cluster up" "see $DIR/log"
        finish
        exit 1
    fi
}

