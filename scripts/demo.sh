#!/usr/bin/env bash
# The main job, shown end to end on this machine:
#   a private Slurm cluster (4x4x2 torus, 32 slurmd's) with the spares plugins and sparesd,
#   a stencil job submitted with --spares=3D(2,1) --job-shape=3x3x2 --no-kill, run once without
#   failures for the reference checksum, then again while a compute node is killed:
#   the substitution sparesd chose, the ranks restarted on it from their checkpoint, the same
#   checksum at the end, and the cluster taken down again.
#
#   scripts/demo.sh [--slurm RELEASE]   RELEASE 22.05 (the host's Slurm, the default), 24.11 or
#                                       26.05 (the same cluster in a container of that
#                                       release's Debian, tests/cluster/box.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
# shellcheck source=tests/cluster/releases.sh
. tests/cluster/releases.sh
if [[ ${1:-} == --slurm ]]; then
    SPARES_SLURM=${2:?--slurm needs a release: $SPARES_RELEASES}
fi
release_vars "${SPARES_SLURM:-22.05}"
export SPARES_SLURM=$RELEASE
if [[ $SUITE == host ]]; then
    export SPARES_CLUSTER_DIR=${SPARES_CLUSTER_DIR:-/tmp/spares-demo}
else
    export SPARES_CLUSTER_DIR=${SPARES_CLUSTER_DIR:-/tmp/spares-demo-$SPARES_RELEASE_TAG}
fi
DIR=$SPARES_CLUSTER_DIR
CLUSTER=tests/cluster/cluster.sh
INSIDE=${SPARES_INSIDE_BOX:-0}
BIN=${CARGO_TARGET_DIR:-$ROOT/target}/release
WORK=$DIR/demo
VICTIM=node06
# Bold headings on a terminal only: `scripts/demo.sh >demo.log` gets plain text.
if [[ -t 1 && ${TERM:-dumb} != dumb ]]; then
    say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
else
    say() { printf '\n== %s\n' "$*"; }
fi
# shellcheck source=tests/cluster/e2e-lib.sh
. tests/cluster/e2e-lib.sh

if ((!INSIDE)); then
    scripts/setup.sh
    say "building spares (release; the first time takes a few minutes)"
    cargo build --release -q -p spares-cli -p spank_spares -p job_submit_spares -p sparesd -p spares-client -p spares-stencil
    if [[ $SUITE == host ]]; then
        say "starting the local Slurm cluster (32 slurmd's on this machine, sparesd, node-down trigger)"
    else
        say "starting Slurm $RELEASE in a container of Debian $SUITE: 32 slurmd's, sparesd, node-down trigger (the first time makes its root filesystem: minutes)"
    fi
    trap '$CLUSTER down >/dev/null 2>&1 || true' EXIT
    if [[ $SUITE == host ]]; then
        SPARES_SKIP_BUILD=1 $CLUSTER up >/dev/null
    else
        # The plugins from this release's headers (scripts/build-plugins.sh), then the box.
        $CLUSTER up >/dev/null
        # The rest runs in the box, where sbatch, sinfo and kill are the cluster's own; the
        # box is stopped here afterwards.
        rc=0
        $CLUSTER exec env SPARES_INSIDE_BOX=1 bash scripts/demo.sh --slurm "$RELEASE" || rc=$?
        say "cleaning up"
        $CLUSTER down >/dev/null 2>&1 && echo "cluster and container stopped"
        trap - EXIT
        exit "$rc"
    fi
fi
eval "$($CLUSTER env)"
export SLURM_CONF SPARES_SOCKET
rm -rf "$WORK"
mkdir -p "$WORK/ref" "$WORK/fail"
sinfo -o '%P %D %T %N'

say "the job's spare map: 18 compute nodes (ranks 0-17), 14 spares (spares plan)"
"$BIN/spares" plan -t configs/torus-4x4x2.yaml --shape 3x3x2 --spares '3D(2,1)' -p 7p --show-nodes \
    -o "$WORK/map.json" | grep -E '^(box|compute|spares|compute nodes|spare nodes)'

e2e_write_job "$WORK/ref" 200 0
e2e_write_job "$WORK/fail" 200 40
say "the job script (sbatch -N32 --no-kill --spares='3D(2,1)' --job-shape=3x3x2 job.sh)"
sed -n '3,4p' "$WORK/fail/job.sh" | sed "s|$BIN/||g; s|$WORK/fail|.|g"

say "run 1, no failure: a 48x48x32-cell heat stencil, 18 ranks, 200 iterations"
ref=$(e2e_submit "$WORK/ref")
e2e_wait_job_end "$ref" 180
grep -E '^(spares-run|result)' "$WORK/ref/job-$ref.out"
refsum=$(e2e_checksum "$WORK/ref/job-$ref.out")

say "run 2, the same job; its compute node $VICTIM dies during the run"
job=$(e2e_submit "$WORK/fail")
out=$WORK/fail/job-$job.out
e2e_wait_progress "$out" 0 120
grep -E '^(spares-run|checkpoint)' "$out"
echo "-- killing $VICTIM: $(e2e_kill_node "$VICTIM")"
e2e_wait_job_end "$job" 240
# What spares-run printed after the death (Slurm's and the ranks' own error lines left out).
awk '/^spares-run: .*launch 0 failed/ { on = 1 } on' "$out" | grep -E '^(spares-run| +rank|checkpoint|result)'
sum=$(e2e_checksum "$out")

say "where rank 0..17 ran before and after the failure (printed by the ranks themselves)"
paste <(e2e_ranks_of_launch "$out" 0) <(e2e_ranks_of_launch "$out" 1 | awk '{ print $2 }') |
    awk '{ printf "rank %2d: %s -> %s%s\n", $1, $2, $3, ($2 == $3 ? "" : "   (moved)") }' | paste - -

say "what sparesd recorded (sparesctl show, saved by the job before its epilog)"
cat "$WORK/fail/show-$job.txt"

say "the same substitution from the model alone (spares substitute --fail $VICTIM)"
"$BIN/spares" substitute --map "$WORK/map.json" --fail "$VICTIM"

say "result"
echo "failure-free run:      checksum $refsum"
echo "run with $VICTIM dead: checksum $sum"
if [[ -n $sum && $sum == "$refsum" ]]; then
    echo "the same answer, computed on the spares after the failure"
else
    echo "the checksums differ: see $out" >&2
    exit 1
fi

((INSIDE)) && exit 0 # the host stops the box
say "cleaning up"
$CLUSTER down >/dev/null 2>&1 && echo "cluster stopped"
trap - EXIT
