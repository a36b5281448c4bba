#!/usr/bin/env bash
# Scheduling with spares as a user meets it, on the private 4x4x2 torus cluster
# (tests/cluster/cluster.sh): `-N` alone with --spares (the compute shape derived by
# job_submit and handed to the nodes in the job's spank_job_env), `-N` that disagrees with
# --job-shape, --job-shape without --spares, srun outside an allocation, and the message and
# Slurm error text of every refusal (real sbatch output). The cluster is taken down on exit.
#
#   tests/cluster/sched.sh [--slurm RELEASE]   exit 0 when every check passed; the last line
#                                 reads "N passed, M failed" (tests/cluster/lib.sh)
#
# SPARES_KEEP_CLUSTER=1 leaves the cluster running.

set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
# shellcheck source=tests/cluster/lib.sh
. "$HERE/lib.sh"
spares_test_release "$0" "$@"
SPARES_TEST_BUILD="spares-cli sparesd spares-client"
spares_test_start "$0" "$@"
pass "cluster up: 32 nodes idle (Slurm $RELEASE)"
POLICY=$DIR/etc/spares.yaml
WORK=$(mktemp -d "$DIR/sched.XXXXXX")
cd "$WORK" || exit 1

SPARES=${CARGO_TARGET_DIR:-$ROOT/target}/release/spares

nodes_of() { # job id -> its (lowest) node count
    local n
    n=$(job_field "$1" NumNodes)
    echo "${n%%-*}"
}

# ------------------------------------------------------------------ -N alone (issue 13.1)
# The expected map: what `spares plan` makes of the 3x3x2 grid with 3D(2,1).
"$SPARES" plan -t "$ROOT/configs/torus-4x4x2.yaml" --shape 3x3x2 --spares '3D(2,1)' -o cli-map.json >/dev/null
"$SPARES" rankfile --map cli-map.json --format hostfile >cli-hosts
cat >job.sh <<'EOF'
#!/bin/bash
srun -N "$SLURM_JOB_NUM_NODES" --ntasks-per-node=1 bash -c \
    'echo "$SLURMD_NODENAME ${SLURM_SPARES_ROLE:-unset} ${SLURM_SPARES_RANK:-none}"' | sort >roles.txt
cp "$SLURM_SPARES_MAP" map.json
cp "$SLURM_SPARES_HOSTFILE" hosts.txt
EOF
chmod +x job.sh
wait_free 32
out=$(sbatch -N 18 --spares=auto -o job.out ./job.sh 2>&1)
job=$(sed -n 's/^Submitted batch job \([0-9]*\)$/\1/p' <<<"$out")
if [[ $job =~ ^[0-9]+$ ]]; then
    pass "sbatch -N 18 --spares=auto accepted without --job-shape (job $job)"
    if grep -qF "spares: 18 compute nodes as a 3x3x2 grid, spares 3D(2,1) (auto: table row for the largest jobs): the job gets the 4x4x2 box, 32 nodes" <<<"$out"; then
        pass "sbatch tells the user what the job gets: $(grep -F 'spares:' <<<"$out")"
    else
        fail "sbatch tells the user what the job gets" "$out"
    fi
    nodes=$(nodes_of "$job")
    req=$(job_field "$job" ReqNodeList)
    check "padded to the 4x4x2 box: 32 nodes, node[01-32] (NumNodes=$nodes ReqNodeList=$req)" \
        test "$nodes/$req" = "32/node[01-32]"
    state=$(wait_job "$job" 120)
    check "job $job completed" test "$state" = COMPLETED
    expected=$(awk '{ print $1, "compute", NR - 1 }' cli-hosts
        for i in $(seq -f 'node%02g' 1 32); do grep -qx "$i" cli-hosts || echo "$i spare none"; done)
    if [[ -s roles.txt && $(cat roles.txt) == "$(sort <<<"$expected")" ]]; then
        pass "every node built the same map from the decision in spank_job_env: 18 compute, 14 spares"
    else
        fail "every node built the map of the 3x3x2 grid" "$(diff <(sort <<<"$expected") roles.txt | head)"
    fi
    if cmp -s map.json cli-map.json && cmp -s hosts.txt cli-hosts; then
        pass "SLURM_SPARES_MAP and SLURM_SPARES_HOSTFILE equal 'spares plan --shape 3x3x2 --spares 3D(2,1)'"
    else
        fail "the map equals the CLI's" "$(diff map.json cli-map.json | head -5)"
    fi
else
    fail "sbatch -N 18 --spares=auto accepted" "$out"
fi

submit_held() { # sbatch args... -> "job id|what sbatch printed"
    local out
    out=$(sbatch --hold -o /dev/null "$@" --wrap true 2>&1)
    echo "$(sed -n 's/^Submitted batch job \([0-9]*\)$/\1/p' <<<"$out")|$out"
}
r=$(submit_held -N 4 --spares=auto)
if [[ $(nodes_of "${r%%|*}") == 6 && $r == *"spares: 4 compute nodes as a 2x1x2 grid, spares 3D(1,1) (auto: table row for jobs of up to 4 nodes): the job gets the 3x1x2 box, 6 nodes"* ]]; then
    pass "-N 4 --spares=auto follows the table's row for 4 nodes: 3D(1,1), 2x1x2 in a 3x1x2 box (6 nodes)"
else
    fail "-N 4 --spares=auto follows the table's row for 4 nodes" "$r"
fi
r=$(submit_held -N 9 '--spares=3D(1,1)')
check "-N 9 --spares=3D(1,1): 3x3x1 in a 4x3x1 box (12 nodes)" test "$(nodes_of "${r%%|*}")" = 12
# -N with --job-shape: the compute count or the box count, never silently something else.
r=$(submit_held -N 18 '--spares=3D(2,1)' --job-shape=3x3x2)
if [[ $(nodes_of "${r%%|*}") == 32 && $r == *"spares: 18 compute nodes as a 3x3x2 grid"*"32 nodes"* ]]; then
    pass "-N 18 --job-shape=3x3x2 (the compute count) becomes 32 nodes, and sbatch says so"
else
    fail "-N 18 --job-shape=3x3x2 says what it becomes" "$r"
fi
r=$(submit_held -N 32 '--spares=3D(2,1)' --job-shape=3x3x2)
check "-N 32 --job-shape=3x3x2 (the box count) is accepted" test "$(nodes_of "${r%%|*}")" = 32
scancel --quiet --user="$(id -un)"

# ------------------------------------------------------------------ refusals (issue 16.5, 16.7)
expect_refused "-N that disagrees with --job-shape" \
    "spares: -N 20 does not match --job-shape=3x3x2 (18 compute nodes; with spares 3D(2,1) the job's 4x4x2 box has 32 nodes): give -N 18, or -N 32, or leave -N out" \
    --slurm "Node count specification invalid" sbatch -N 20 '--spares=3D(2,1)' --job-shape=3x3x2 --wrap true
expect_refused "--job-shape without --spares (the site's default is none)" \
    "spares: --job-shape=3x3x2 without --spares: this cluster's default is no spares" \
    --slurm "Bad argument" sbatch --job-shape=3x3x2 --wrap true
expect_refused "--spares without -N or --job-shape" \
    "spares: --spares=3D(2,1) needs the job's size: -N (the number of compute nodes) or --job-shape=AxBxC" \
    --slurm "Job size specification needs to be provided" sbatch '--spares=3D(2,1)' --wrap true
expect_refused "-N with no box that fits" "spares: --spares=auto with -N 17:" \
    --slurm "Requested node configuration is not available" sbatch -N 17 --spares=auto --wrap true
expect_refused "a shape the site does not allow" "spares: --spares=3D(1,2) is not allowed on this cluster" \
    --slurm "Access/permission denied" sbatch '--spares=3D(1,2)' --job-shape=2x2x2 --wrap true
expect_refused "a box larger than the torus" \
    "spares: compute shape 4x4x2 with spares 3D(2,1) needs a 5x5x2 box; the network is only 4x4x2" \
    --slurm "Requested node configuration is not available" sbatch '--spares=3D(2,1)' --job-shape=4x4x2 --wrap true
# --nodelist, --exclude and --partition with --spares: tests/cluster/partitions.sh.

# srun outside an allocation would start a task on every node of the box, spares included.
out=$(timeout 60 srun '--spares=3D(2,1)' --job-shape=3x3x2 hostname 2>&1)
rc=$?
if ((rc != 0)) && grep -qF "spares: srun --spares outside an allocation would start a task on every node of the padded box, spares included: allocate the box with salloc or sbatch" <<<"$out" &&
    ! grep -q '^node' <<<"$out"; then
    pass "srun --spares outside an allocation is refused with what to do instead"
else
    fail "srun --spares outside an allocation is refused" "rc=$rc $out"
fi
# salloc with -N alone, and srun inside it (the options are in its environment): accepted.
wait_free 6
out=$(timeout 60 salloc -N 4 --spares=auto bash -c 'echo "nodes=$SLURM_JOB_NUM_NODES"; srun -N 1 true && echo srun-ok' 2>&1)
if grep -q "nodes=6" <<<"$out" && grep -q srun-ok <<<"$out"; then
    pass "salloc -N 4 --spares=auto gets its 6-node box; srun inside it passes"
else
    fail "salloc -N 4 --spares=auto, srun inside" "$out"
fi

busy=$(sbatch --parsable -w node07 -o /dev/null --wrap 'sleep 60')
busy_on "$busy" node07
sleep 3 # boxes pinned above count as busy until a later free-node file shows them
SPARES_ON_NO_PLACEMENT=reject "$CLUSTER" policy
expect_refused "no free box, policy reject" "spares: no free 4x4x2 box on the torus-4x4x2 network" \
    --slurm "Job can not start immediately" sbatch '--spares=3D(2,1)' --job-shape=3x3x2 --wrap true
"$CLUSTER" policy
scancel --quiet "$busy"

cp "$POLICY" policy.good
echo "colour: blue" >>"$POLICY"
expect_refused "a broken policy file" "spares: policy file $POLICY: unknown field \`colour\`" \
    --slurm "Slurm internal error, contact system administrator" sbatch '--spares=3D(2,1)' --job-shape=3x3x2 --wrap true
cp policy.good "$POLICY.new" && mv "$POLICY.new" "$POLICY"

# A topology naming nodes Slurm does not know: Slurm refuses the pinned node list after
# job_submit accepted it; the user must still read what spares did.
cp "$ROOT/configs/torus-4x4x2.yaml" ghost.yaml
sed -i 's/^nodes: .*/nodes: ghost[01-32]/' ghost.yaml
sed -i "s|^topology: .*|topology: $WORK/ghost.yaml|; /^free_nodes_file:/d" "$POLICY"
expect_refused "a topology naming nodes Slurm does not know" \
    "spares: 18 compute nodes as a 3x3x2 grid, spares 3D(2,1): the job gets the 4x4x2 box, 32 nodes" \
    --slurm "Invalid node name specified" sbatch '--spares=3D(2,1)' --job-shape=3x3x2 --wrap true
cp policy.good "$POLICY.new" && mv "$POLICY.new" "$POLICY"

# Spares sized by failure rate (issue 13.5): the same -N 18 --spares=auto job gets the
# lightest shape for an hour on reliable nodes, and the reason says with what probability.
cp "$POLICY" policy.good
echo "failure_rate: {node_mtbf_hours: 5000, target: 0.99, default_hours: 24}" >>"$POLICY"
r=$(submit_held -N 18 --spares=auto -t 60)
if [[ $(nodes_of "${r%%|*}") == 24 && $r == *"spares: 18 compute nodes as a 3x3x2 grid, spares 3D(1,1) (auto: failure rate: the smallest box that keeps its spares over 1 h with probability 100.00% (target 99.00%; 0.005 failures expected among 24 nodes))"* ]]; then
    pass "failure-rate policy: -N 18 --spares=auto -t 60 gets 3D(1,1) (24 nodes), with its probability"
else
    fail "failure-rate policy: -N 18 --spares=auto -t 60" "$r"
fi
expect_refused "failure-rate policy: a method that can die before its spares run out" \
    "--spare-method=1D can fail before its spares run out" --slurm "Bad argument" \
    sbatch -N 18 --spares=auto --spare-method=1D -t 60 --wrap true
cp policy.good "$POLICY.new" && mv "$POLICY.new" "$POLICY"

scancel --quiet --user="$(id -un)"
finish
