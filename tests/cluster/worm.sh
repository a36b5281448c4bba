#!/usr/bin/env bash
# Boxes with dead nodes at start ("worm-eaten" boxes, issue 13.4 and 14.5), on the private
# 4x4x2 torus cluster: node01 and node06 are set DOWN, so no 4x4x2 box is free. Without the
# policy setting the test job (3D(2,1) on 3x3x2, the whole torus) is refused; with
# max_unusable_nodes_at_start: 2 it gets the 30 usable nodes, its map has node01 and node06
# failed before rank 0 starts, equal to `spares substitute` of those two nodes, it runs with
# the failure-free checksum and `sparesctl show` says "failed at start"; with initial_map:
# remap its map has no more collisions and the same checksum. Refusals (too many unusable
# nodes, or nodes the method cannot substitute) are checked with sbatch's real output. The
# cluster is taken down on exit.
#
#   tests/cluster/worm.sh [--slurm RELEASE]   exit 0 when every check passed; the last line
#                           reads "N passed, M failed" (tests/cluster/lib.sh)
#
# SPARES_KEEP_CLUSTER=1 leaves the cluster running; SPARES_SKIP_BUILD=1 uses the binaries in
# target/release as they are.

set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
BIN=${CARGO_TARGET_DIR:-$ROOT/target}/release
DEAD=(node01 node06)
ITERS=60
# shellcheck source=tests/cluster/e2e-lib.sh
. "$HERE/e2e-lib.sh"
# shellcheck source=tests/cluster/lib.sh
. "$HERE/lib.sh"
spares_test_release "$0" "$@"
SPARES_TEST_BUILD="spares-stencil spares-cli spares-client sparesd"
spares_test_start "$0" "$@"
pass "cluster up: 32 nodes idle (Slurm $RELEASE)"
eval "$("$CLUSTER" env)"
export SLURM_CONF SPARES_SOCKET
WORK=$(mktemp -d "$DIR/worm.XXXXXX")
cd "$WORK" || exit 1
SPARES=$BIN/spares
TEST_JOB=('--spares=3D(2,1)' --job-shape=3x3x2)

policy() { # on_no_placement, extra policy lines
    SPARES_ON_NO_PLACEMENT=$1 SPARES_POLICY_EXTRA=${2:-} "$CLUSTER" policy
}
run_job() { # directory -> job id; the test job, its user message in DIR/submit.txt
    local d=$1
    mkdir -p "$d"
    e2e_write_job "$d" "$ITERS" 0
    sbatch --parsable --no-kill "${TEST_JOB[@]}" -o "$d/job-%j.out" -D "$d" "$d/job.sh" 2>"$d/submit.txt" | tail -1
}
finished() { # job id, directory: completed with a checksum -> prints it
    local job=$1 d=$2
    e2e_wait_job_end "$job" 180 || { scancel "$job"; return 1; }
    [[ $(e2e_job_state "$job") == "COMPLETED 0:0 " ]] || return 1
    e2e_checksum "$d/job-$job.out"
}

# ------------------------------------------------------------------ reference: no dead node
ref=$(run_job "$WORK/ref")
refsum=$(finished "$ref" "$WORK/ref")
if [[ -n $refsum ]]; then
    pass "failure-free run (job $ref): checksum $refsum"
else
    fail "failure-free run (job $ref)" "$(tail -20 "$WORK/ref/job-$ref.out" 2>/dev/null)"
fi

# The expected map: spares substitute of the dead nodes, in box order, from spares plan's map.
"$SPARES" plan -t "$ROOT/configs/torus-4x4x2.yaml" --shape 3x3x2 --spares '3D(2,1)' -p 7p -o map-0.json >/dev/null
fails=()
for n in "${DEAD[@]}"; do fails+=(--fail "$n"); done
"$SPARES" substitute --map map-0.json "${fails[@]}" -o map-dead.json >/dev/null
"$SPARES" substitute --map map-0.json "${fails[@]}" --json >substitute.json

scontrol update nodename="$(IFS=,; echo "${DEAD[*]}")" state=down reason=worm-test
end=$((SECONDS + 30))
until listed_as node01 unusable && listed_as node06 unusable; do
    ((SECONDS < end)) || break
    sleep 0.3
done
if listed_as node01 unusable && listed_as node06 unusable; then
    pass "${DEAD[*]} DOWN: the free-node file lists them unusable"
else
    fail "the free-node file lists the DOWN nodes unusable" "$(head -8 "$DIR/run/free-nodes")"
fi

# ------------------------------------------------------------------ refusals
policy reject
expect_refused "no setting: no free box, refused as before" \
    "spares: no free 4x4x2 box on the torus-4x4x2 network" sbatch "${TEST_JOB[@]}" --wrap true
policy reject "max_unusable_nodes_at_start: 1"
expect_refused "one unusable node allowed, the only box has two" \
    "spares: no free 4x4x2 box" sbatch "${TEST_JOB[@]}" --wrap true
# 3D(1,1) on 3x4x2: spares in the x=3 plane only; 1D slides along lines, and node01 and
# node02 share the one spare of theirs.
scontrol update nodename=node06 state=resume
scontrol update nodename=node02 state=down reason=worm-test
end=$((SECONDS + 30))
until listed_as node02 unusable && ! listed_as node06 unusable; do
    ((SECONDS < end)) || break
    sleep 0.3
done
policy reject "max_unusable_nodes_at_start: 2"
expect_refused "dead nodes the job's method cannot substitute" \
    "no box with up to 2 unusable nodes can start either: spares 3D(1,1) with method 1D cannot substitute dead node node02" \
    sbatch '--spares=3D(1,1)' --job-shape=3x4x2 --spare-method=1D --wrap true
scontrol update nodename=node02 state=resume
scontrol update nodename=node06 state=down reason=worm-test
end=$((SECONDS + 30))
until listed_as node06 unusable && lists_free node02; do
    ((SECONDS < end)) || break
    sleep 0.3
done

# ------------------------------------------------------------------ the worm-eaten start
policy reject "max_unusable_nodes_at_start: 2"
job=$(run_job "$WORK/slide")
msg=$(cat "$WORK/slide/submit.txt")
if [[ $job =~ ^[0-9]+$ && $msg == *"30 nodes; node[01,06] of the box cannot be used (down or drained): the map treats them as failed before the job starts"* ]]; then
    pass "sbatch: $(grep -F spares: <<<"$msg" | head -1 | sed 's/^sbatch: //')"
else
    fail "the job is placed on the box with two dead nodes, and sbatch says so" "job=$job; $msg"
fi
sum=$(finished "$job" "$WORK/slide")
if [[ -n $sum && $sum == "$refsum" ]]; then
    pass "job $job on the worm-eaten box: failure-free checksum $sum"
else
    fail "job $job on the worm-eaten box keeps the checksum" "got '$sum', want '$refsum'; $(tail -20 "$WORK/slide/job-$job.out" 2>/dev/null)"
fi
show=$WORK/slide/show-$job.json
if [[ $(jq -S -c '.map.ranks' "$show" 2>/dev/null) == "$(jq -S -c '.ranks' map-dead.json)" &&
    $(jq -S -c '.map.failed' "$show" 2>/dev/null) == "$(jq -S -c '.failed' map-dead.json)" ]]; then
    pass "the job's map equals spares substitute --fail node01 --fail node06"
else
    fail "the job's map equals spares substitute of the dead nodes" "$(jq -c '.map.ranks' "$show" 2>&1 | head -3) vs $(jq -c .ranks map-dead.json)"
fi
want=$(jq -S -c '[.steps[] | {node, method: .method_used, slide, moves}]' substitute.json)
got=$(jq -S -c '[.history[] | select(.step == 0) | {node, method: .method_used, slide, moves}]' "$show" 2>/dev/null)
if [[ -n $got && $got == "$want" ]] && grep -q '^failed at start: node01, node06$' "$WORK/slide/show-$job.txt"; then
    pass "sparesctl show: 'failed at start: node01, node06' and the substitutions of spares substitute"
else
    fail "sparesctl show tells the failures at start" "want $want
got  $got
$(cat "$WORK/slide/show-$job.txt" 2>/dev/null)"
fi
slide_load=$(jq '.map.collisions' "$show" 2>/dev/null)

# ------------------------------------------------------------------ initial_map: remap
policy reject "max_unusable_nodes_at_start: 2
initial_map: remap
initial_map_iterations: 20000"
# The previous job's nodes are free again in the file (completing counts as busy).
wait_free 30
job=$(run_job "$WORK/remap")
sum=$(finished "$job" "$WORK/remap")
show=$WORK/remap/show-$job.json
load=$(jq '.map.collisions' "$show" 2>/dev/null)
if [[ -n $sum && $sum == "$refsum" && -n $load && -n $slide_load ]] && ((load <= slide_load)); then
    pass "initial_map: remap (job $job): collisions $load (slides: $slide_load), checksum $sum"
else
    fail "initial_map: remap keeps the checksum with no more collisions" "job '$job' $(e2e_job_state "$job"); sum '$sum' want '$refsum'; collisions '$load' vs '$slide_load'
$(cat "$WORK/remap/submit.txt" 2>/dev/null)
$(tail -20 "$WORK/remap/job-$job.out" 2>/dev/null)
$(head -8 "$DIR/run/free-nodes" 2>/dev/null)"
fi

policy wait
scontrol update nodename="$(IFS=,; echo "${DEAD[*]}")" state=resume
cd / || true
finish
