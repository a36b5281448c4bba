#!/usr/bin/env bash
# End to end on the private 4x4x2 torus cluster (tests/cluster/cluster.sh): a stencil job with
# spares (--no-kill --spares=3D(2,1) --job-shape=3x3x2) loses three compute nodes one after
# another and finishes on its spares with the failure-free run's checksum.
#
#   1. A failure-free run of the job gives the reference checksum; in the same allocation
#      spares-halo-bench measures the failure-free map against the map after the three
#      failures (as `spares substitute` computes it) and prints the slowdown ratios.
#   2. The same job again; during its run the slurmd of node06 is killed with the step's
#      processes on it, then node11's, then (after sparesd is killed with -9 and restarted,
#      which must lose nothing) node23's: the 3D slides are used up by the first two, the
#      third needs a 2D slide.
#   3. Checks: the job completes; same checksum; after each failure the ranks ran on the nodes
#      `spares substitute` gives for the same failures; `sparesctl show` has the failures,
#      methods and moves of `spares substitute`.
#
#   tests/cluster/e2e.sh [--slurm RELEASE]   exit 0 when every check passed; last line
#                              "N passed, M failed" (RELEASE: 22.05, 24.11, 26.05; lib.sh)
#
# SPARES_KEEP_CLUSTER=1 leaves the cluster running; SPARES_SKIP_BUILD=1 uses the binaries in
# target/release as they are.

set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
BIN=${CARGO_TARGET_DIR:-$ROOT/target}/release
VICTIMS=(node06 node11 node23)
ITERS=200
DELAY_MS=40
# shellcheck source=tests/cluster/e2e-lib.sh
. "$HERE/e2e-lib.sh"
# shellcheck source=tests/cluster/lib.sh
. "$HERE/lib.sh"
spares_test_release "$0" "$@"
SPARES_TEST_BUILD="spares-stencil spares-cli spares-client sparesd"
spares_test_start "$0" "$@"
pass "cluster up: 32 nodes idle, sparesd and the node-down trigger running (Slurm $RELEASE)"
eval "$("$CLUSTER" env)"
export SLURM_CONF SPARES_SOCKET
WORK=$(mktemp -d "$DIR/e2e.XXXXXX")
cd "$WORK" || exit 1

# The expected maps: the failure-free one (the SPANK plugin's map is byte-identical to
# `spares plan`'s, tests/cluster/plugins.sh) and the maps after 1, 2, 3 failures.
SPARES=$BIN/spares
"$SPARES" plan -t "$ROOT/configs/torus-4x4x2.yaml" --shape 3x3x2 --spares '3D(2,1)' -p 7p -o map-0.json >/dev/null
fails=()
for k in 1 2 3; do
    fails+=(--fail "${VICTIMS[k - 1]}")
    "$SPARES" substitute --map map-0.json "${fails[@]}" -o "map-$k.json" >/dev/null
done
"$SPARES" substitute --map map-0.json "${fails[@]}" --json >substitute.json
for k in 0 1 2 3; do
    "$SPARES" rankfile --map "map-$k.json" | awk '{ print NR - 1, $1 }' >"expected-$k.txt"
done
methods=$(jq -r '[.steps[].method_used] | join(" ")' substitute.json)
if [[ $methods == "3D 3D 2D" ]]; then
    pass "spares substitute: ${VICTIMS[*]} take 3D, 3D, then 2D (the 3D slides used up)"
else
    fail "spares substitute: 3D, 3D, then a lower method" "$methods"
fi

# ------------------------------------------------------------------ 1. failure-free run
mkdir -p ref fail
e2e_write_job "$WORK/ref" "$ITERS" 0 \
    "--map $WORK/map-3.json --baseline $WORK/map-0.json --size 1MiB --allreduce 64KiB --iters 10"
ref=$(e2e_submit "$WORK/ref")
if [[ $ref =~ ^[0-9]+$ ]] && e2e_wait_job_end "$ref" 180; then
    out=ref/job-$ref.out
    state=$(e2e_job_state "$ref")
    refsum=$(e2e_checksum "$out")
    if [[ $state == "COMPLETED 0:0 " && -n $refsum ]]; then
        pass "failure-free run (job $ref): checksum $refsum"
    else
        fail "failure-free run (job $ref) completes with a checksum" "$state; $(tail -20 "$out")"
    fi
    if [[ $(e2e_ranks_of_launch "$out" 0) == "$(cat expected-0.txt)" ]]; then
        pass "failure-free run: rank i on the i-th compute node of spares plan"
    else
        fail "failure-free run: ranks where spares plan puts them" "$(diff expected-0.txt <(e2e_ranks_of_launch "$out" 0))"
    fi
    if grep -qE '^slowdown \(map / baseline\): halo [0-9.]+ +barrier [0-9.]+ +allreduce [0-9.]+' "$out"; then
        pass "spares-halo-bench: $(grep '^slowdown' "$out")"
    else
        fail "spares-halo-bench prints the slowdown ratios" "$(grep -A5 -E 'baseline|halo-bench' "$out" | tail -10)"
    fi
else
    fail "failure-free run (job ${ref:-?}) ends" "$ref"
    refsum=
fi

# ------------------------------------------------------------------ 2. three node deaths
e2e_write_job "$WORK/fail" "$ITERS" "$DELAY_MS"
job=$(e2e_submit "$WORK/fail")
out=fail/job-$job.out
same_story=
for k in 1 2 3; do
    victim=${VICTIMS[k - 1]}
    if ! e2e_wait_progress "$out" $((k - 1)) 120; then
        fail "launch $((k - 1)) of job $job makes progress" "$(tail -20 "$out" 2>/dev/null)"
        break
    fi
    if ((k == 3)); then
        # sparesd dies (kill -9) and comes back between two failures: nothing may be lost.
        before=$("$BIN/sparesctl" show "$job" --json)
        pid=$(e2e_sparesd_pid)
        kill -9 "$pid"
        "$CLUSTER" sparesd >/dev/null 2>&1
        after=$("$BIN/sparesctl" show "$job" --json)
        if [[ -n $before && $before == "$after" && $(e2e_sparesd_pid) != "$pid" ]]; then
            same_story=1
            pass "sparesd killed (-9) and restarted during the job: sparesctl show is the same (2 failures, map)"
        else
            fail "sparesd restart loses nothing" "$(diff <(echo "$before") <(echo "$after") | head -20)"
        fi
    fi
    echo "     killing $victim: $(e2e_kill_node "$victim")"
    if e2e_wait_line "$out" "^spares-run: \\[ *[0-9.]+s\\] launch $k:" 120; then
        pass "after the death of $victim the job goes on: $(grep -E "^spares-run: \\[ *[0-9.]+s\\] launch $k:" "$out")"
    else
        fail "launch $k after the death of $victim" "$(tail -20 "$out")"
        break
    fi
done
if e2e_wait_job_end "$job" 240; then
    state=$(e2e_job_state "$job")
    if [[ $state == "COMPLETED 0:0 " ]] && grep -qE "^spares-run: \\[ *[0-9.]+s\\] job $job finished: 3 node failure\\(s\\), 4 launch\\(es\\)" "$out"; then
        pass "the job completes after 3 node failures and 4 launches"
    else
        fail "the job completes after 3 node failures" "$state; $(grep -E '^spares-run|error' "$out" | tail -20)"
    fi
else
    fail "job $job ends within 240 s" "$(tail -20 "$out")"
    scancel "$job" 2>/dev/null
fi
sum=$(e2e_checksum "$out")
if [[ -n $sum && $sum == "$refsum" ]]; then
    pass "checksum after 3 failures equals the failure-free run's ($sum)"
else
    fail "checksum after 3 failures equals the failure-free run's" "got '${sum}', want '${refsum}'"
fi
for k in 0 1 2 3; do
    got=$(e2e_ranks_of_launch "$out" $k)
    if [[ -n $got && $got == "$(cat "expected-$k.txt")" ]]; then
        pass "launch $k: the 18 ranks ran on the nodes spares substitute gives after $k failure(s)"
    else
        fail "launch $k: ranks on spares substitute's nodes" "$(diff "expected-$k.txt" <(echo "$got"))"
    fi
done
restarts=$(grep -oE 'from the checkpoint of iteration [0-9]+' "$out" | awk '{ print $NF }' | tr '\n' ' ')
if [[ $(wc -w <<<"$restarts") == 3 ]]; then
    pass "each relaunch starts from a checkpoint (iterations $restarts)"
else
    fail "relaunches start from checkpoints" "$restarts"
fi

# The story sparesd tells (saved by the job before its epilog released it).
show=fail/show-$job.json
story() { jq -S -c "$1" "$2"; }
want=$(story '[.steps[] | {node, method: .method_used, slide, moves}]' substitute.json)
got=$(story '[.history[] | {node, method: .method_used, slide, moves}]' "$show" 2>/dev/null)
if [[ -n $got && $got == "$want" ]]; then
    pass "sparesctl show: failures ${VICTIMS[*]}, methods $methods, and every move as spares substitute"
else
    fail "sparesctl show tells spares substitute's story" "want $want
got  $got"
fi
if [[ $(jq -S -c '.map.ranks' "$show" 2>/dev/null) == "$(jq -S -c '.ranks' map-3.json)" &&
    $(jq -r '.failed | join(" ")' "$show" 2>/dev/null) == "${VICTIMS[*]}" ]]; then
    pass "sparesctl show: failed nodes and final map as spares substitute"
else
    fail "sparesctl show: failed nodes and final map" "$(jq -c '{failed, ranks: .map.ranks}' "$show" 2>&1 | head -5)"
fi
[[ -n $same_story ]] || fail "sparesd restart was checked"
if grep -qE "^spares-run: \\[ *[0-9.]+s\\] failure +[123]: node(06|11|23) .*, reported by" "$out"; then
    pass "spares-run printed each substitution: $(grep -cE '^spares-run: \[ *[0-9.]+s\] failure +[0-9]+:' "$out") failures, $(grep -cE '^ +rank +[0-9]+  node' "$out") moves"
else
    fail "spares-run prints the substitutions" "$(grep '^spares-run' "$out" | head)"
fi

cd / || true
finish
