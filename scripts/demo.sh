#!/usr/bin/env bash
# The main job, shown end to end on this machine:
#   a private Slurm cluster (4x4x2 torus, 32 slurmd's) with the spares plugins loaded,
#   a job submitted with --spares=3D(2,1) --job-shape=3x3x2 --no-kill,
#   its spare map (which nodes compute, which wait as spares),
#   a compute node killed, the job carrying on, and the substitution computed for it,
#   the cluster taken down again.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
export SPARES_CLUSTER_DIR=${SPARES_CLUSTER_DIR:-/tmp/spares-demo}
CLUSTER=tests/cluster/cluster.sh
TOPO=configs/torus-4x4x2.yaml
WORK=$SPARES_CLUSTER_DIR/demo
say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

scripts/setup.sh
say "building spares (release)"
cargo build --release -q -p spares-cli -p spank_spares -p job_submit_spares
SPARES=$ROOT/target/release/spares

say "starting the local Slurm cluster"
trap '$CLUSTER down >/dev/null 2>&1 || true' EXIT
$CLUSTER up >/dev/null
eval "$($CLUSTER env)"
mkdir -p "$WORK"
sinfo -o '%P %D %T %N'

say "sbatch --help shows the spares options"
sbatch --help | grep -E -- '--(spares|job-shape|spare-method)' || true

say "submitting: sbatch -N32 --no-kill --spares='3D(2,1)' --job-shape=3x3x2"
job=$(sbatch --parsable -N32 --no-kill --spares='3D(2,1)' --job-shape=3x3x2 \
    -o "$WORK/job-%j.out" --wrap 'sleep 300')
for _ in $(seq 50); do
    [ "$(squeue -h -j "$job" -o %T)" = RUNNING ] && break
    sleep 0.2
done
squeue -j "$job" -o '%i %T %D %N'

say "the job's spare map (spares plan)"
$SPARES plan -t $TOPO --shape 3x3x2 --spares '3D(2,1)' -p 7p --show-nodes -o "$WORK/map.json"

victim=node06
say "killing the slurmd of compute node $victim (rank 5)"
pid=$(awk -v n="slurmd-$victim" '$1 == n { print $2 }' "$SPARES_CLUSTER_DIR/run/pids")
kill -9 "$pid"
scontrol update NodeName=$victim State=DOWN Reason=spares-demo
sleep 1
sinfo -n $victim -o '%N %T %E'
echo "job $job is still $(squeue -h -j "$job" -o %T) on $(squeue -h -j "$job" -o %D) nodes (--no-kill)"

say "the substitution (spares substitute --fail $victim)"
$SPARES substitute --map "$WORK/map.json" --fail $victim -o "$WORK/map-after.json"

say "where the ranks run now (SLURM_HOSTFILE for srun --distribution=arbitrary)"
$SPARES rankfile --map "$WORK/map-after.json" | awk '{ printf "rank %2d on %s\n", NR - 1, $1 }' | paste - - - -

say "cleaning up"
scancel "$job"
$CLUSTER down >/dev/null 2>&1 && echo "cluster stopped"
trap - EXIT
