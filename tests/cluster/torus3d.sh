#!/usr/bin/env bash
# Native placement on Slurm 26.05's topology/torus3d (issue 13, item 3), on the private 4x4x2
# torus with placements 2x2x1, 2x2x2, 3x3x2 and 4x4x2 (cluster.sh with SPARES_TORUS3D=1: the
# policy reads Slurm's topology.yaml, so placement is native): jobs with spares are padded to
# a placement and placed by Slurm (no node list), several pack into the torus, each job's map
# is the sub-cube Slurm gave it and a step's ranks land where the map says; a DOWN node moves
# the placements; a box that is no placement is refused naming the placements; jobs without
# spares behave as Slurm's torus3d makes them (a -N that is no placement is refused by Slurm).
#
#   tests/cluster/torus3d.sh --slurm 26.05   exit 0 when every check passed
#
# Older releases have no topology/torus3d: the test says so and exits 0.
# SPARES_KEEP_CLUSTER=1 leaves the cluster running.

set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=tests/cluster/lib.sh
. "$HERE/lib.sh"
spares_test_release "$0" "$@"
if [[ $SLURM_READS_TOPOLOGY_YAML != 1 ]]; then
    echo "SKIP torus3d: Slurm $RELEASE has no topology/torus3d (26.05 has); the plugin pins boxes there (plugins.sh, sched.sh)"
    exit 0
fi
export SPARES_TORUS3D=1
SPARES_TEST_BUILD=""
spares_test_start "$0" "$@"
pass "cluster up: 32 nodes idle (Slurm $RELEASE, topology/torus3d)"
MAPS=$DIR/state/spares
WORK=$(mktemp -d "$DIR/torus3d.XXXXXX")
cd "$WORK" || exit 1

topo=$(scontrol show topo 2>&1)
if grep -q '3x3x2' <<<"$topo"; then
    pass "scontrol show topo lists the placements: $(grep -o 'PlacementDims=[^ ]*' <<<"$topo" | tr '\n' ' ')"
else
    fail "slurmctld runs topology/torus3d with the placements" "$topo"
fi

submit() { # sbatch arguments... -> job id (sbatch's message goes to submit.err)
    local out
    out=$(sbatch --parsable -o /dev/null "$@" 2>submit.err)
    out=$(tail -n1 <<<"$out")
    echo "${out%%;*}"
}
# A running job's map is the sub-cube Slurm gave it: the map's hosts are the job's nodes.
map_is_allocation() { # job id
    local map=$MAPS/spares-job-$1.json i
    for i in $(seq 50); do [[ -s $map ]] && break; sleep 0.1; done
    [[ -s $map ]] || return 1
    diff <(jq -r '.hosts[]' "$map" | sort) \
        <(scontrol show hostnames "$(job_field "$1" NodeList)" | sort) >/dev/null
}

# ------------------------------------------------- packing: three 2x2x2 placements
cat >ranks.sh <<'EOF'
#!/bin/bash
# The step's ranks on the map's hostfile: "rank node" per task.
SLURM_HOSTFILE=$SLURM_SPARES_HOSTFILE srun --distribution=arbitrary -n "$(grep -c . "$SLURM_SPARES_HOSTFILE")" \
    bash -c 'echo "$SLURM_PROCID $SLURMD_NODENAME"' | sort -n >"ranks.$SLURM_JOB_ID"
cp "$SLURM_SPARES_HOSTFILE" "hosts.$SLURM_JOB_ID"
sleep 300
EOF
chmod +x ranks.sh
jobs=()
for _ in 1 2 3; do
    jobs+=("$(submit '--spares=3D(1,1)' --job-shape=1x2x2 ./ranks.sh)")
done
msg=$(cat submit.err)
all_run=1
for j in "${jobs[@]}"; do
    [[ $j =~ ^[0-9]+$ ]] && wait_state "$j" RUNNING 120 || all_run=0
done
if ((all_run)); then
    pass "three jobs --spares=3D(1,1) --job-shape=1x2x2 run at once: $msg"
else
    fail "three jobs with spares pack into the torus" "jobs ${jobs[*]}: $msg; $(squeue 2>&1)"
fi
nodes_ok=1 maps_ok=1 ranks_ok=1 all_nodes=""
for j in "${jobs[@]}"; do
    [[ $(job_field "$j" NumNodes) == 8 && $(job_field "$j" ReqNodeList) == "(null)" ]] || nodes_ok=0
    map_is_allocation "$j" || maps_ok=0
    all_nodes+=" $(scontrol show hostnames "$(job_field "$j" NodeList)" | tr '\n' ' ')"
    for _ in $(seq 100); do [[ -s ranks.$j ]] && break; sleep 0.2; done
    [[ $(grep -c . "hosts.$j" 2>/dev/null) == 4 ]] &&
        diff <(awk '{ print NR - 1, $1 }' "hosts.$j") "ranks.$j" >/dev/null 2>&1 || ranks_ok=0
done
distinct=$(tr ' ' '\n' <<<"$all_nodes" | grep -c . )
unique=$(tr ' ' '\n' <<<"$all_nodes" | grep . | sort -u | grep -c .)
if ((nodes_ok)) && ((distinct == 24 && unique == 24)); then
    pass "each job has 8 nodes (a 2x2x2 placement), no node list of ours, no node shared"
else
    fail "each job gets its own 2x2x2 placement" "$(for j in "${jobs[@]}"; do scontrol show job -o "$j" | grep -o 'NodeList=[^ ]*\|NumNodes=[^ ]*\|ReqNodeList=[^ ]*' | tr '\n' ' '; echo; done)"
fi
if ((maps_ok)); then
    pass "each job's map is the sub-cube Slurm allocated (map hosts = job's nodes)"
else
    fail "maps equal the allocations" "$(for j in "${jobs[@]}"; do jq -c '{origin, hosts}' "$MAPS/spares-job-$j.json"; job_field "$j" NodeList; done 2>&1)"
fi
if ((ranks_ok)); then
    pass "a step on SLURM_SPARES_HOSTFILE puts rank i on the map's line i, in every job"
else
    fail "step ranks where the map says" "$(for j in "${jobs[@]}"; do paste "hosts.$j" "ranks.$j"; done 2>&1)"
fi
scancel "${jobs[@]}"
for j in "${jobs[@]}"; do wait_state "$j" CANCELLED 60 || true; done

# ------------------------------------------------- a DOWN node moves placements
scontrol update nodename=node01 state=down reason=torus3d-test
j=$(submit '--spares=3D(1,1)' --job-shape=1x2x2 --wrap 'sleep 300')
if [[ $j =~ ^[0-9]+$ ]] && wait_state "$j" RUNNING 120 &&
    ! scontrol show hostnames "$(job_field "$j" NodeList)" | grep -qx node01 && map_is_allocation "$j"; then
    pass "node01 DOWN: the job's placement avoids it ($(job_field "$j" NodeList), map $(jq -c .origin "$MAPS/spares-job-$j.json"))"
else
    fail "a DOWN node moves the placement" "job $j: $(scontrol show job -o "$j" 2>&1)"
fi
scancel "$j"
wait_state "$j" CANCELLED 60 || true
scontrol update nodename=node01 state=resume

# ------------------------------------------------- refusals
# 3x3x1 + 3D(1,1) = 4x3x1, whose only placement is 4x4x2: 23 spares of 32, over max_fraction.
out=$(sbatch -o /dev/null '--spares=3D(1,1)' --job-shape=3x3x1 --wrap true 2>&1)
if ! grep -q 'Submitted batch job' <<<"$out" &&
    grep -qF 'Slurm places only these boxes on the spares torus' <<<"$out" &&
    grep -qF '2x2x1 (4 nodes), 2x2x2 (8 nodes), 3x3x2 (18 nodes), 4x4x2 (32 nodes); try' <<<"$out"; then
    pass "a box that is no placement is refused naming the placements: $(grep -o 'spares: .*' <<<"$out" | head -1)"
else
    fail "a box matching no placement: the refusal names the placements" "$out"
fi
# --spares=auto with -N 12: the table's 3D(2,1) gives 4x4x2 with 62.5% spares, over the band;
# auto falls back to 3D(1,1), whose 3x3x2 box is a placement. With the x=1 nodes of z=0
# DOWN, the only free 3x3x2 placements start at x=2 and wrap round the torus (x = 2, 3, 0).
scontrol update nodename=node[02,06,10,14] state=down reason=torus3d-test
j=$(submit --spares=auto -N 12 --wrap 'sleep 300')
if [[ $j =~ ^[0-9]+$ ]] && wait_state "$j" RUNNING 120 && [[ $(job_field "$j" NumNodes) == 18 ]] &&
    map_is_allocation "$j" && [[ $(jq -c '.origin[0]' "$MAPS/spares-job-$j.json") == 2 ]]; then
    pass "--spares=auto -N 12, x=1 DOWN: the wrapped 3x3x2 placement Slurm chose is the map's box, origin $(jq -c .origin "$MAPS/spares-job-$j.json") ($(cat submit.err))"
else
    fail "--spares=auto picks a placement, which wraps" "job $j: $(cat submit.err; scontrol show job -o "$j" 2>&1; jq -c '{origin, hosts}' "$MAPS/spares-job-$j.json")"
fi
scancel "$j"
wait_state "$j" CANCELLED 60 || true
scontrol update nodename=node[02,06,10,14] state=resume

# ------------------------------------------------- the site's partitions for jobs with spares
# A site with a flat partition beside the torus names the torus in the policy: a job with
# spares without -p is sent there, one sent elsewhere is refused (Slurm would give it nodes
# that are no box).
SPARES_POLICY_EXTRA="partitions: [torus]" "$CLUSTER" policy
j=$(submit -N 4 --spares=auto --hold --wrap true)
if [[ $j =~ ^[0-9]+$ && $(job_field "$j" Partition) == torus ]] && grep -qF ', in partition torus' submit.err; then
    pass "policy partitions: [torus]: job $j without -p goes to torus ($(grep -F spares: submit.err | head -1))"
else
    fail "policy partitions: [torus]: a job without -p goes to torus" "job $j: $(cat submit.err)"
fi
scancel "$j" 2>/dev/null
out=$(sbatch -o /dev/null -p second -N 4 --spares=auto --wrap true 2>&1)
if ! grep -q 'Submitted batch job' <<<"$out" &&
    grep -qF "spares: jobs with spares run in partition torus on this cluster (the site policy's partitions), not in second: submit with -p torus, or without -p" <<<"$out"; then
    pass "policy partitions: [torus]: -p second with spares is refused: $(grep -F spares: <<<"$out" | head -1)"
else
    fail "policy partitions: [torus]: -p second with spares is refused" "$out"
fi
SPARES_POLICY_EXTRA="" "$CLUSTER" policy

# ------------------------------------------------- jobs without spares
out=$(sbatch -o /dev/null -N 3 --wrap true 2>&1)
if ! grep -q 'Submitted batch job' <<<"$out" && grep -qF 'Requested topology configuration is not available' <<<"$out"; then
    pass "-N 3 without spares (no placement): Slurm refuses it: $out"
else
    fail "-N 3 without spares is refused by Slurm" "$out"
fi
j=$(submit -N 4 --wrap 'sleep 2')
if [[ $j =~ ^[0-9]+$ ]] && wait_state "$j" COMPLETED 120 && [[ $(job_field "$j" NumNodes) == 4 ]] &&
    [[ ! -e $MAPS/spares-job-$j.json ]]; then
    pass "-N 4 without spares: a 2x2x1 placement, untouched by spares (no map)"
else
    fail "-N 4 without spares runs untouched" "job $j: $(scontrol show job -o "$j" 2>&1)"
fi

finish
