#!/usr/bin/env bash
# End to end with re-mapping at relaunch: tests/cluster/e2e.sh's stencil job (--no-kill
# --spares=3D(2,1) --job-shape=3x3x2 on the 4x4x2 torus cluster) loses three nodes holding a
# rank, while sparesd runs with `[remap] at_relaunch = true` (tests/cluster/sparesd-remap.toml),
# so spares-run asks sparesd for a re-map before each relaunch.
#
#   1. A failure-free run gives the reference checksum.
#   2. The same job again; three times, the node of a rank in the job's current map (sparesd's)
#      dies; sparesd is killed (-9) and restarted before the third death.
#   3. Checks: the job completes with the failure-free checksum; spares-run re-mapped at each
#      relaunch and printed it; sparesctl show has the three failures and a re-map after each,
#      none of them worse than the map it started from, and the same story after sparesd's
#      restart; the ranks of each launch ran on the nodes of sparesd's map for it; the final
#      map has no more collisions than sliding alone gives for the same dead nodes
#      (`spares substitute`).
#
#   tests/cluster/e2e-remap.sh      exit 0 when every check passed; last line "N passed, M failed"
#
# Runs on the host's Slurm release only (the remap path is the same on every release).
# SPARES_KEEP_CLUSTER=1 leaves the cluster running; SPARES_SKIP_BUILD=1 uses the binaries in
# target/release as they are.

set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
BIN=${CARGO_TARGET_DIR:-$ROOT/target}/release
RANKS_KILLED=(4 13 10)
ITERS=200
DELAY_MS=40
# shellcheck source=tests/cluster/e2e-lib.sh
. "$HERE/e2e-lib.sh"
# shellcheck source=tests/cluster/lib.sh
. "$HERE/lib.sh"
spares_test_release "$0" "$@"
export SPARES_SPARESD_CONFIG=$HERE/sparesd-remap.toml
SPARES_TEST_BUILD="spares-stencil spares-cli spares-client sparesd"
spares_test_start "$0" "$@"
eval "$("$CLUSTER" env)"
export SLURM_CONF SPARES_SOCKET
if [[ $("$BIN/sparesctl" health --json | jq -r '.remap.at_relaunch') == true ]]; then
    pass "cluster up; sparesd's policy: re-map at relaunch ($(jq -c .remap <("$BIN/sparesctl" health --json)))"
else
    fail "sparesd runs with [remap] at_relaunch = true" "$("$BIN/sparesctl" health --json)"
fi
WORK=$(mktemp -d "$DIR/e2e-remap.XXXXXX")
cd "$WORK" || exit 1
SPARES=$BIN/spares
"$SPARES" plan -t "$ROOT/configs/torus-4x4x2.yaml" --shape 3x3x2 --spares '3D(2,1)' -p 7p -o map-0.json >/dev/null

# ------------------------------------------------------------------ 1. failure-free run
mkdir -p ref fail
e2e_write_job "$WORK/ref" "$ITERS" 0
ref=$(e2e_submit "$WORK/ref")
refsum=
if [[ $ref =~ ^[0-9]+$ ]] && e2e_wait_job_end "$ref" 180; then
    refsum=$(e2e_checksum "ref/job-$ref.out")
    if [[ $(e2e_job_state "$ref") == "COMPLETED 0:0 " && -n $refsum ]]; then
        pass "failure-free run (job $ref): checksum $refsum"
    else
        fail "failure-free run (job $ref) completes with a checksum" "$(tail -20 "ref/job-$ref.out")"
    fi
else
    fail "failure-free run (job ${ref:-?}) ends" "$ref"
fi

# ------------------------------------------------------------------ 2. three node deaths
e2e_write_job "$WORK/fail" "$ITERS" "$DELAY_MS"
job=$(e2e_submit "$WORK/fail")
out=fail/job-$job.out
victims=()
same_story=
for k in 1 2 3; do
    if ! e2e_wait_progress "$out" $((k - 1)) 120; then
        fail "launch $((k - 1)) of job $job makes progress" "$(tail -20 "$out" 2>/dev/null)"
        break
    fi
    if ((k == 3)); then
        before=$("$BIN/sparesctl" show "$job" --json)
        pid=$(e2e_sparesd_pid)
        kill -9 "$pid"
        "$CLUSTER" sparesd >/dev/null 2>&1
        after=$("$BIN/sparesctl" show "$job" --json)
        if [[ -n $before && $before == "$after" && $(jq '.remaps | length' <<<"$after") == 2 ]]; then
            same_story=1
            pass "sparesd killed (-9) and restarted: sparesctl show is the same (2 failures, 2 re-maps, map)"
        else
            fail "sparesd restart keeps the re-maps" "$(diff <(echo "$before") <(echo "$after") | head -20)"
        fi
    fi
    # A node holding a rank in the job's current (re-mapped) map.
    rank=${RANKS_KILLED[k - 1]}
    victim=$("$BIN/sparesctl" map "$job" --hostfile | sed -n "$((rank + 1))p")
    victims+=("$victim")
    echo "     killing $victim (rank $rank): $(e2e_kill_node "$victim")"
    if e2e_wait_line "$out" "^spares-run: \\[ *[0-9.]+s\\] launch $k:" 150; then
        pass "after the death of $victim the job goes on: $(grep -E "^spares-run: \\[ *[0-9.]+s\\] launch $k:" "$out")"
    else
        fail "launch $k after the death of $victim" "$(tail -20 "$out")"
        break
    fi
done
if e2e_wait_job_end "$job" 240; then
    if [[ $(e2e_job_state "$job") == "COMPLETED 0:0 " ]] &&
        grep -qE "^spares-run: \\[ *[0-9.]+s\\] job $job finished: 3 node failure\\(s\\), 4 launch\\(es\\)" "$out"; then
        pass "the job completes after 3 node failures and 4 launches"
    else
        fail "the job completes after 3 node failures" "$(grep -E '^spares-run|error' "$out" | tail -20)"
    fi
else
    fail "job $job ends within 240 s" "$(tail -20 "$out")"
    scancel "$job" 2>/dev/null
fi
sum=$(e2e_checksum "$out")
if [[ -n $sum && $sum == "$refsum" ]]; then
    pass "checksum after 3 failures and 3 re-maps equals the failure-free run's ($sum)"
else
    fail "checksum with re-maps equals the failure-free run's" "got '${sum}', want '${refsum}'"
fi
nremap=$(grep -cE "^spares-run: \\[ *[0-9.]+s\\] re-map +[0-9]+ after failure" "$out")
if ((nremap == 3)) && grep -q "checkpoints stay in" "$out"; then
    pass "spares-run re-mapped before each relaunch: $(grep -E '^spares-run: .* re-map ' "$out" | sed 's/^spares-run: \[ *[0-9.]*s\] //' | tr '\n' ';')"
else
    fail "spares-run re-maps before each of the 3 relaunches" "$(grep '^spares-run' "$out" | tail -20)"
fi
# Each launch ran its ranks on the map spares-run had from sparesd for it.
for k in 0 1 2 3; do
    want=$("$SPARES" rankfile --map "fail/run-$job/map-$k.json" 2>/dev/null | awk '{ print NR - 1, $1 }')
    got=$(e2e_ranks_of_launch "$out" $k)
    if [[ -n $got && $got == "$want" ]]; then
        pass "launch $k: the 18 ranks ran on the nodes of sparesd's map"
    else
        fail "launch $k: ranks on sparesd's map" "$(diff <(echo "$want") <(echo "$got"))"
    fi
done

# The story sparesd tells (saved by the job before its epilog released it).
show=fail/show-$job.json
if [[ $(jq -r '[.history[].node] | join(" ")' "$show" 2>/dev/null) == "${victims[*]}" &&
    $(jq -c '[.remaps[].after_step]' "$show") == "[1,2,3]" &&
    $(jq '[.remaps[] | select(.collisions_after > .collisions_before)] | length' "$show") == 0 ]]; then
    pass "sparesctl show: failures ${victims[*]}, a re-map after each: $(jq -c '[.remaps[] | {moved, collisions: "\(.collisions_before)->\(.collisions_after)"}]' "$show")"
else
    fail "sparesctl show tells the failures and re-maps" "$(jq -c '{h: [.history[].node], r: .remaps}' "$show" 2>&1 | head -5)"
fi
if grep -qE "^re-map +3 after failure 3:" "fail/show-$job.txt"; then
    pass "sparesctl show (text) tells the re-maps"
else
    fail "sparesctl show (text) tells the re-maps" "$(head -20 "fail/show-$job.txt")"
fi
fails=()
for v in "${victims[@]}"; do fails+=(--fail "$v"); done
slid=$("$SPARES" substitute --map map-0.json "${fails[@]}" --json 2>/dev/null | jq '.steps[-1].collisions_after')
final=$(jq '.collisions' "$show" 2>/dev/null)
if [[ -n $final && -n $slid && $final -le $slid ]]; then
    pass "final map: collisions $final with re-maps, $slid with sliding alone for the same dead nodes"
else
    fail "re-mapped final map has no more collisions than sliding alone" "re-mapped '$final', slid '$slid'"
fi
[[ -n $same_story ]] || fail "sparesd restart was checked"

cd / || true
finish
