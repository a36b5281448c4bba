#!/usr/bin/env bash
# configs/simulate-array.sbatch on the local cluster: a small campaign split over a real Slurm
# job array (4 tasks), merged by the merge job the array submits itself (afterok), must equal
# the same campaign run at once.
#
#   tests/cluster/simulate-array.sh      (brings the cluster up and down itself)
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
CLUSTER=tests/cluster/cluster.sh
WORK=$(mktemp -d /tmp/spares-simarray.XXXXXX)
pass=0 fail=0
check() { # check NAME COMMAND...
    if "${@:2}"; then echo "PASS $1"; pass=$((pass + 1)); else echo "FAIL $1"; fail=$((fail + 1)); fi
}
cleanup() {
    "$CLUSTER" down >/dev/null 2>&1 || true
    rm -rf "$WORK"
}
trap cleanup EXIT

cargo build --release -q -p spares-cli
SPARES_BIN=$ROOT/target/release/spares
"$CLUSTER" up >/dev/null
eval "$("$CLUSTER" env)"

SAMPLES=400
job=$(sbatch --parsable --array=0-3 --chdir="$WORK" -o "$WORK/task-%a.out" \
    --export=ALL,SAMPLES=$SAMPLES,SEED=7,OUT=$WORK/results,SPARES=$SPARES_BIN \
    configs/simulate-array.sbatch)
# Wait for the array and its merge job to leave the queue (give up after 5 minutes).
for _ in $(seq 300); do
    [[ -z $(squeue -h -j "$job" 2>/dev/null) && -z $(squeue -h -n spares-sim-merge 2>/dev/null) ]] &&
        [[ -e $WORK/results/merge.out ]] && break
    sleep 1
done
shards=("$WORK"/results/shard-*.json)
check "the job array wrote 4 shards" test "${#shards[@]}" -eq 4
check "each task wrote its worst maps" test -d "$WORK/results/worst-3/hybrid/failed-276"
check "the array's own merge job wrote merged.json, merged.csv and the figure" \
    test -s "$WORK/results/merged.json" -a -s "$WORK/results/merged.csv" -a -s "$WORK/results/collisions.svg"
cp "$WORK/results/merged.json" "$WORK/merged.json"
cp "$WORK/results/merged.csv" "$WORK/merged.csv"
"$SPARES_BIN" simulate --network 12x12x12 --spares '3D(2,1)' --pattern 7p --method 'hybrid,0D' \
    --samples "$SAMPLES" --seed 7 --keep-worst 768 --at 1,2,3,4,100,200,276 \
    --worst-dir "$WORK/single-worst" --quiet -o "$WORK/single.json" --csv "$WORK/single.csv" \
    >/dev/null
check "merged shards equal the single run (CSV)" cmp -s "$WORK/merged.csv" "$WORK/single.csv"
# The JSON differs only in the shard fields: compare with those normalised.
norm() { sed -e 's/"shards":\[[0-9,]*\]/"shards":[]/' -e 's/"shard_count":[0-9]*/"shard_count":0/' "$1"; }
check "merged shards equal the single run (JSON, worst cases included)" \
    cmp -s <(norm "$WORK/merged.json") <(norm "$WORK/single.json")

echo "$pass passed, $fail failed"
[[ $fail -eq 0 ]]
