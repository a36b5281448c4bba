#!/usr/bin/env bash
# End-to-end smoke test of the spares Slurm plugins on a private local
# cluster (tests/cluster/cluster.sh): brings the cluster up, checks that
# sbatch/srun (SPANK, allocator and local sides), slurmstepd (remote side)
# and slurmctld (job_submit) load and use the plugins, and tears the cluster
# down again, also on failure or Ctrl-C.
#
#   tests/cluster/smoke.sh [--slurm RELEASE]   exit 0 when every check passed;
#                                 the last line reads "N passed, M failed"
#                                 (RELEASE: 22.05, 24.11, 26.05; tests/cluster/lib.sh)
#
# Set SPARES_KEEP_CLUSTER=1 to leave the cluster running afterwards.

set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=tests/cluster/lib.sh
. "$HERE/lib.sh"
spares_test_release "$0" "$@"
SPARES_TEST_BUILD="sparesd spares-client"
spares_test_start "$0" "$@"
pass "cluster up: 32 nodes idle (Slurm $RELEASE)"
WORK=$(mktemp -d "$DIR/smoke.XXXXXX")
cd "$WORK" || exit 1

# --- 1. sbatch --help lists the options (SPANK plugin loaded by sbatch).
help=$(sbatch --help 2>&1)
for opt in --spares= --job-shape= --spare-method=; do
    if grep -q -- "$opt" <<<"$help"; then
        pass "sbatch --help lists $opt"
    else
        fail "sbatch --help lists $opt" "$(grep -i -A2 spank <<<"$help")"
    fi
done

# Every sbatch, salloc and srun loads the SPANK plugin: it carries its own unwinder
# (slurm-plugin/spank/build.rs) rather than loading libgcc_s, most of its load time.
needed=$(readelf -d "$DIR/plugins/spank_spares.so" 2>&1 | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | paste -sd' ')
if [[ -n $needed && $needed != *libgcc_s* ]]; then
    pass "spank_spares.so needs only $needed"
else
    fail "spank_spares.so does not need libgcc_s" "NEEDED: '$needed'"
fi

# --- 2. Malformed values fail on the submit side with a readable message.
expect_refused "sbatch --spares=bogus fails" \
    "spares: invalid --spares=bogus:" sbatch --spares=bogus --wrap true
expect_refused "sbatch --spares='3D(4,1)' fails (r > q)" \
    "spares: invalid --spares=3D(4,1): r = 4 must be between 1 and q = 3" sbatch '--spares=3D(4,1)' --wrap true
expect_refused "sbatch --job-shape=3x0x2 fails" \
    "spares: invalid --job-shape=3x0x2:" sbatch --job-shape=3x0x2 --wrap true
expect_refused "sbatch --spare-method=sideways fails" \
    "spares: invalid --spare-method=sideways:" sbatch --spare-method=sideways --wrap true
expect_refused "srun --spares=bogus fails" \
    "spares: invalid --spares=bogus:" srun --spares=bogus true

# --- 3. A well-formed job is accepted, runs, and its options reach
#        slurmctld (job_submit) and the job's environment.
# -N is the compute count (or the box's, or left out); sbatch tells the box on stderr.
out=$(sbatch --parsable -N18 '--spares=3D(2,1)' --job-shape=3x3x2 '--spare-method=hybrid(3D+1D+0D)' \
    -o "$WORK/job-%j.out" --wrap 'env | grep SPANK' 2>"$WORK/sbatch.err" || cat "$WORK/sbatch.err")
jobid=${out%%;*}
if [[ $jobid =~ ^[0-9]+$ ]]; then
    pass "sbatch -N18 --spares='3D(2,1)' accepted (job $jobid)"
    state=$(wait_job "$jobid" 120)
    if [[ $state == COMPLETED ]]; then
        pass "job $jobid completed"
    else
        fail "job $jobid completed" "state $state"
    fi
    if grep -qF '_SLURM_SPANK_OPTION_spares_spares=3D(2,1)' "$WORK/job-$jobid.out" 2>/dev/null; then
        pass "job environment carries --spares"
    else
        fail "job environment carries --spares" "$(cat "$WORK/job-$jobid.out" 2>&1)"
    fi
    if grep -qF 'spares: submit new job "wrap"' "$DIR/log/slurmctld.log" &&
        grep -qF 'spares=3D(2,1) job-shape=3x3x2 spare-method=hybrid(3D+1D+0D)' "$DIR/log/slurmctld.log"; then
        pass "job_submit saw the options (slurmctld log)"
    else
        fail "job_submit saw the options (slurmctld log)" "$(grep spares "$DIR/log/slurmctld.log" | tail -5)"
    fi
else
    fail "sbatch -N18 --spares='3D(2,1)' accepted" "$out"
fi

# --- 4. srun works, and the plugin runs in slurmstepd on every node of the
#        step, naming each node by its own Slurm name.
out=$(srun -N2 -J smoke-srun --spares=none hostname 2>&1)
rc=$?
if ((rc == 0)) && (($(grep -c . <<<"$out") == 2)); then
    pass "srun -N2 hostname"
else
    fail "srun -N2 hostname" "rc=$rc: $out"
fi
step_job=$(squeue -h -t all -n smoke-srun -o %i 2>/dev/null | sort -n | tail -1)
nodes=$(grep -h "spares: job ${step_job:-none} step 0 on " "$DIR"/log/slurmd-node*.log 2>/dev/null |
    sed 's/.* step 0 on \([^ ]*\) .*/\1/' | sort -u | wc -l)
if ((nodes == 2)); then
    pass "SPANK plugin ran in slurmstepd on both nodes (job $step_job)"
else
    fail "SPANK plugin ran in slurmstepd on both nodes" \
        "job '$step_job': $(grep -h 'spares: job' "$DIR"/log/slurmd-node*.log | tail -4)"
fi

# --- 5. job_submit itself rejects a malformed value that bypassed sbatch's
#        check (a libslurm client that sets spank_job_env directly).
helper=$WORK/submit_spank_env
if cc -o "$helper" "$HERE/submit_spank_env.c" -lslurm 2>"$WORK/cc.err"; then
    out=$("$helper" '_SLURM_SPANK_OPTION_spares_spares=bogus' 2>&1)
    rc=$?
    if ((rc != 0)) && grep -qF 'spares: invalid --spares=bogus:' <<<"$out"; then
        pass "job_submit rejects --spares=bogus with its message"
    else
        fail "job_submit rejects --spares=bogus with its message" "rc=$rc: $out"
    fi
    out=$("$helper" '_SLURM_SPANK_OPTION_spares_spares=auto' '_SLURM_SPANK_OPTION_spares_job_shape=2x2x1' 2>&1)
    if [[ $? == 0 && $out == *"Submitted batch job"* ]]; then
        pass "job_submit accepts --spares=auto"
    else
        fail "job_submit accepts --spares=auto" "$out"
    fi
else
    fail "build submit_spank_env helper" "$(cat "$WORK/cc.err")"
fi

# --- 6. Nothing crashed.
if status=$("$CLUSTER" status 2>&1); then
    pass "all daemons still running"
else
    fail "all daemons still running" "$status"
fi

finish
