#!/usr/bin/env bash
# SLURM_SPARES_* outside the batch script, the current map, and the history after the job, on
# the private 4x4x2 torus cluster (tests/cluster/cluster.sh):
#   1. a step started from outside the job (`srun --jobid`) gets every node's role and rank and
#      the prolog's files, also when the caller's environment forges them;
#   2. in an `salloc` allocation, steps get them; the salloc shell itself does not (Slurm runs
#      no SPANK hook in salloc once the job has its id), and `sparesctl map` gives it the map;
#   3. after a substitution, `sparesctl map JOB --hostfile` is the current map (the dead node
#      gone) while $SLURM_SPARES_HOSTFILE stays the initial one (docs/user.md);
#   4. after scancel (the epilog's release) `sparesctl show JOB` still tells what happened.
#
#   tests/cluster/steps.sh [--slurm RELEASE]   exit 0 when every check passed; the last line
#                                              reads "N passed, M failed"

set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
# shellcheck source=tests/cluster/lib.sh
. "$HERE/lib.sh"
spares_test_release "$0" "$@"
SPARES_TEST_BUILD="spares-cli sparesd spares-client"
spares_test_start "$0" "$@"
pass "cluster up: 32 nodes idle (Slurm $RELEASE)"
CTL=$DIR/bin/sparesctl
export SPARES_SOCKET=$DIR/run/sparesd.sock
WORK=$(mktemp -d "$DIR/steps.XXXXXX")
cd "$WORK" || exit 1

SPARES=${CARGO_TARGET_DIR:-$ROOT/target}/release/spares
"$SPARES" plan -t "$ROOT/configs/torus-4x4x2.yaml" --shape 3x3x2 --spares '3D(2,1)' -o cli-map.json >/dev/null
"$SPARES" rankfile --map cli-map.json --format hostfile >cli-hosts
expected=$(awk '{ print $1, "compute", NR - 1 }' cli-hosts
    for i in $(seq -f 'node%02g' 1 32); do grep -qx "$i" cli-hosts || echo "$i spare none"; done)
expected=$(sort <<<"$expected")

roles_of_step() { # srun arguments...: "node role rank" of every node, sorted
    srun "$@" -N32 --ntasks-per-node=1 bash -c \
        'echo "$SLURMD_NODENAME ${SLURM_SPARES_ROLE:-unset} ${SLURM_SPARES_RANK:-none}"' | sort
}

# ------------------------------------------------------- 1. srun --jobid from outside
job=$(sbatch --parsable -o /dev/null '--spares=3D(2,1)' --job-shape=3x3x2 \
    --wrap 'echo "$SLURM_SPARES_MAP $SLURM_SPARES_HOSTFILE" >batch-env; sleep 300' 2>&1)
job=$(tail -n1 <<<"$job") # sbatch's "spares: ... the job gets ..." line comes first
job=${job%%;*}
if [[ $job =~ ^[0-9]+$ ]] && wait_state "$job" RUNNING 120; then
    pass "job $job with spares runs"
else
    fail "a job with spares runs" "$job"
    finish
    exit 1
fi
outside=$(roles_of_step --jobid="$job" --overlap)
if [[ $outside == "$expected" ]]; then
    pass "srun --jobid from outside the job: every node has its SLURM_SPARES_ROLE/RANK (18 compute, 14 spares)"
else
    fail "srun --jobid from outside the job: SLURM_SPARES_ROLE/RANK" "$(diff <(echo "$expected") <(echo "$outside"))"
fi
for _ in $(seq 50); do [[ -s batch-env ]] && break; sleep 0.1; done
step_env=$(SLURM_SPARES_MAP=/etc/passwd SLURM_SPARES_HOSTFILE=/etc/passwd SLURM_SPARES_ROLE=compute \
    srun --jobid="$job" --overlap -N1 -n1 -w node32 \
    bash -c 'echo "$SLURM_SPARES_MAP $SLURM_SPARES_HOSTFILE ${SLURM_SPARES_ROLE:-unset}"')
if [[ $step_env == "$(cat batch-env) spare" ]]; then
    pass "srun --jobid with forged SLURM_SPARES_* in the caller's environment: the prolog's files and node32's own role win"
else
    fail "srun --jobid with forged SLURM_SPARES_*" "step: $step_env; batch: $(cat batch-env)"
fi

# ------------------------------------------- 3. after a substitution: initial vs current
initial_file=$(cut -d' ' -f2 batch-env)
"$CTL" fail "$job" node01 >fail.txt 2>&1
"$CTL" map "$job" --hostfile >current-hosts
"$CTL" map "$job" -o current-map.json
if grep -qx node01 "$initial_file" && ! grep -qx node01 current-hosts &&
    [[ $(grep -c . current-hosts) == "$(grep -c . "$initial_file")" ]] &&
    jq -e '.failed | length > 0' current-map.json >/dev/null; then
    pass "after node01's substitution: sparesctl map --hostfile lists the current ranks' nodes (no node01), \$SLURM_SPARES_HOSTFILE is still the initial map"
else
    fail "sparesctl map --hostfile after a substitution" "$(cat fail.txt; diff "$initial_file" current-hosts)"
fi

# ------------------------------------------------------ 4. the history after scancel
scancel "$job"
wait_state "$job" CANCELLED 60 || true
for _ in $(seq 50); do "$CTL" list -h | grep -q "^ *$job " || break; sleep 0.2; done
shown=$("$CTL" show "$job" 2>&1)
if grep -q '^released ' <<<"$shown" && grep -q '^failure   1: node01 ' <<<"$shown"; then
    pass "after scancel (the epilog's release) sparesctl show $job still tells the substitution and the release time"
else
    fail "sparesctl show after scancel" "$shown"
fi

# ------------------------------------------------------------------------ 2. salloc
cat >alloc.sh <<EOF
#!/bin/bash
echo "shell \${SLURM_SPARES_ROLE:-unset} \${SLURM_SPARES_MAP:-unset}" >alloc-shell
srun -N32 --ntasks-per-node=1 bash -c 'echo "\$SLURMD_NODENAME \${SLURM_SPARES_ROLE:-unset} \${SLURM_SPARES_RANK:-none}"' | sort >alloc-roles
srun -N1 -n1 -w "\$(head -1 cli-hosts)" bash -c 'cat "\$SLURM_SPARES_HOSTFILE"' >alloc-step-hosts
"$CTL" map "\$SLURM_JOB_ID" --hostfile >alloc-ctl-hosts
EOF
chmod +x alloc.sh
timeout 120 salloc '--spares=3D(2,1)' --job-shape=3x3x2 ./alloc.sh >salloc.out 2>&1
if [[ -s alloc-roles && $(cat alloc-roles) == "$expected" ]]; then
    pass "salloc: its steps have every node's SLURM_SPARES_ROLE/RANK"
else
    fail "salloc: SLURM_SPARES_* in its steps" "$(cat salloc.out; diff <(echo "$expected") alloc-roles)"
fi
if [[ $(cat alloc-shell 2>/dev/null) == "shell unset unset" && -s alloc-ctl-hosts ]] &&
    cmp -s alloc-ctl-hosts alloc-step-hosts && cmp -s alloc-ctl-hosts cli-hosts; then
    pass "salloc shell: no SLURM_SPARES_* (as docs/user.md says); sparesctl map \$SLURM_JOB_ID --hostfile gives the steps' hostfile"
else
    fail "salloc shell and sparesctl map" "$(cat alloc-shell salloc.out; diff alloc-ctl-hosts alloc-step-hosts)"
fi

finish
