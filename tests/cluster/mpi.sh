#!/usr/bin/env bash
# MPI in the private 4x4x2 torus cluster (tests/cluster/cluster.sh): examples/mpi/halo_bench,
# built with Debian's MPICH, started by `srun --mpi=pmi2` inside a job with spares. (Open MPI
# with --mpi=pmix also starts here, but its TCP transport crashes at start-up in about a third
# of the runs on this loaded 2-core machine: examples/README.md, "MPI in the local cluster".)
#
#   1. A job with --spares=3D(2,1) --job-shape=3x3x2 runs halo_bench on its 18 compute nodes
#      (SLURM_HOSTFILE=$SLURM_SPARES_HOSTFILE, --distribution=arbitrary): the failure-free map.
#   2. In the same job: `spares substitute --fail node06` on the job's map, its hostfile, and
#      halo_bench again on that map (node06 left out) with --baseline the first run's output.
#   3. Checks: the job completes; in each run rank i ran on line i+1 of its hostfile; the
#      second map has no node06; the slowdown ratios are printed; a baseline of another
#      configuration is refused.
#
#   tests/cluster/mpi.sh [--slurm RELEASE]   exit 0 when every check passed; last line
#                              "N passed, M failed" (RELEASE: 22.05, 24.11, 26.05; lib.sh)
#
# Needs mpich and libmpich-dev (scripts/setup.sh). SPARES_KEEP_CLUSTER=1 leaves the
# cluster running; SPARES_SKIP_BUILD=1 uses the binaries in target/release as they are.

set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
BIN=${CARGO_TARGET_DIR:-$ROOT/target}/release
RANKS=18
BENCH_ARGS="--shape 3x3x2 --size 4MiB --allreduce 64KiB --iters 10"

# shellcheck source=tests/cluster/lib.sh
. "$HERE/lib.sh"
spares_test_release "$0" "$@"
SPARES_TEST_BUILD="spares-cli sparesd spares-client"

MPICC=${MPICC:-mpicc.mpich}
if ! command -v "$MPICC" >/dev/null; then
    fail "$MPICC found" "install mpich and libmpich-dev (scripts/setup.sh)"
    finish
    exit 1
fi
spares_test_start "$0" "$@"
pass "cluster up: 32 nodes idle (Slurm $RELEASE)"
eval "$("$CLUSTER" env)"
export SLURM_CONF SPARES_SOCKET
WORK=$(mktemp -d "$DIR/mpi.XXXXXX")
cd "$WORK" || exit 1

plugins=$(srun --mpi=list 2>&1)
if grep -qx $'\tpmi2' <<<"$plugins"; then
    pass "srun --mpi=list offers pmi2"
else
    fail "srun --mpi=list offers pmi2" "$plugins"
fi

# The flags of examples/mpi/Makefile; built here so the source tree stays clean.
if out=$("$MPICC" -O2 -Wall -Wextra -Werror -o "$WORK/halo_bench" "$ROOT/examples/mpi/halo_bench.c" 2>&1); then
    pass "$MPICC examples/mpi/halo_bench.c"
else
    fail "$MPICC examples/mpi/halo_bench.c" "$out"
    finish
    exit 1
fi

cat >job.sh <<EOF
#!/bin/bash
cd "$WORK"
cp "\$SLURM_SPARES_HOSTFILE" hosts-before
SLURM_HOSTFILE=\$SLURM_SPARES_HOSTFILE srun --mpi=pmi2 --distribution=arbitrary -n $RANKS \\
    ./halo_bench $BENCH_ARGS >before.out || exit 10
"$BIN/spares" substitute --map "\$SLURM_SPARES_MAP" --fail node06 -o after.json >substitute.txt || exit 11
"$BIN/spares" rankfile --map after.json --format hostfile -o hosts-after || exit 12
# The next step starts once the previous one has left every node (a step that overlaps the
# end of the last one can be held with "Requested nodes are busy").
steps_gone() {
    for _ in \$(seq 100); do
        [ -z "\$(squeue -h -s -j \$SLURM_JOB_ID -o %i | grep -vE '\.(batch|extern)\$')" ] && sleep 3 && return
        sleep 0.2
    done
}
steps_gone
SLURM_HOSTFILE=hosts-after srun --mpi=pmi2 --distribution=arbitrary -n $RANKS \\
    ./halo_bench $BENCH_ARGS --baseline before.out >after.out || exit 13
# A baseline of another configuration (2 ranks, not $RANKS) must be refused.
steps_gone
SLURM_HOSTFILE=hosts-after srun --mpi=pmi2 --distribution=arbitrary -n 2 \\
    ./halo_bench --shape 2x1x1 --size 4MiB --iters 1 --baseline before.out >reject.out 2>&1
echo \$? >reject.rc
exit 0
EOF
chmod +x job.sh

# The job's final state and exit code, from slurmctld's record.
job_state() {
    scontrol show job "$1" 2>/dev/null | tr ' ' '\n' | awk -F= '$1 == "JobState" || $1 == "ExitCode" { printf "%s ", $2 }'
}
# "rank host" lines a halo_bench output reports, and the ones its hostfile asks for.
ran() { awk '$1 == "rank" && $3 == "on" { print $2, $4 }' "$1"; }
asked() { awk '{ print NR - 1, $1 }' "$1"; }

job=$(sbatch --parsable -N32 --no-kill '--spares=3D(2,1)' --job-shape=3x3x2 -o "$WORK/job-%j.out" -D "$WORK" job.sh)
end=$((SECONDS + 90))
while [[ $job =~ ^[0-9]+$ ]] && ((SECONDS < end)); do
    case $(squeue -h -j "$job" -o %T 2>/dev/null) in
        "" | COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL) break ;;
    esac
    sleep 0.5
done
state=$(job_state "$job")
if [[ $state == "COMPLETED 0:0 " ]]; then
    pass "job $job (two srun --mpi=pmi2 steps of $RANKS ranks) completed"
else
    fail "job ${job:-?} completes" "${state:-no state}; $(tail -20 "job-$job.out" 2>/dev/null)"
    [[ $job =~ ^[0-9]+$ ]] && scancel "$job" 2>/dev/null
fi

for run in before after; do
    if [[ -s $run.out && -s hosts-$run && $(ran "$run.out" | wc -l) == "$RANKS" &&
        $(ran "$run.out") == "$(asked "hosts-$run")" ]]; then
        pass "$run: rank i ran on line i+1 of its hostfile: $(ran "$run.out" | awk '{ printf "%s%s", s, $2; s = "," }')"
    else
        fail "$run: each rank on the node of its hostfile line" \
            "$(diff <(asked "hosts-$run" 2>&1) <(ran "$run.out" 2>&1); tail -5 "job-$job.out" 2>/dev/null)"
    fi
done

if [[ -s hosts-after ]] && ! grep -qx node06 hosts-after && grep -qx node06 hosts-before &&
    [[ $(wc -l <hosts-after) == "$RANKS" ]]; then
    pass "after spares substitute --fail node06: $RANKS ranks, node06 left out ($(grep -E '^ *(method|step|node06)' substitute.txt | head -1 | xargs))"
else
    fail "the map after the failure leaves node06 out" "$(cat hosts-after substitute.txt 2>&1 | head -20)"
fi

re='^slowdown \(map / baseline\): halo [0-9]+\.[0-9]+ +barrier [0-9]+\.[0-9]+ +allreduce [0-9]+\.[0-9]+$'
if grep -q '^mean (ms): halo ' before.out 2>/dev/null && grep -qE "$re" after.out 2>/dev/null; then
    pass "halo_bench --baseline: $(grep '^slowdown' after.out)"
    sed 's/^/     /' <(grep -E '^halo ' before.out after.out)
else
    fail "halo_bench prints the means and the slowdown ratios" "$(cat before.out after.out 2>&1 | grep -v '^rank ')"
fi

if [[ $(cat reject.rc 2>/dev/null) =~ ^[1-9][0-9]*$ ]] && grep -q 'another config' reject.out; then
    pass "a baseline of another configuration is refused (exit $(cat reject.rc))"
else
    fail "a baseline of another configuration is refused" "rc $(cat reject.rc 2>&1); $(head -5 reject.out 2>&1)"
fi

finish
