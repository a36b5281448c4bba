#!/usr/bin/env bash
# Partitions, exclusions and node lists with spares (issue 13.2), on the private 4x4x2 torus
# cluster (tests/cluster/cluster.sh: partition torus, the default, over node[01-32], and
# partition second over node[17-32]). job_submit reads the partitions from the free-node file
# (spares-free-nodes writes `HOSTLIST state=... partitions=...`), never from slurmctld: a job
# with -p second gets a box in second, --exclude keeps the box off nodes, --nodelist nodes
# lie inside the box, and requests no box can meet are refused with what to change (real
# sbatch output). The cluster is taken down on exit.
#
#   tests/cluster/partitions.sh [--slurm RELEASE]   exit 0 when every check passed; the last
#                                 line reads "N passed, M failed" (tests/cluster/lib.sh)
#
# SPARES_KEEP_CLUSTER=1 leaves the cluster running.

set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=tests/cluster/lib.sh
. "$HERE/lib.sh"
spares_test_release "$0" "$@"
SPARES_TEST_BUILD="sparesd spares-client"
spares_test_start "$0" "$@"
pass "cluster up: 32 nodes idle (Slurm $RELEASE)"
WORK=$(mktemp -d "$DIR/partitions.XXXXXX")
cd "$WORK" || exit 1

hosts() { # hostlist -> one name a line
    scontrol show hostnames "$1" 2>/dev/null
}
within() { # hostlist, hostlist: every node of the first is in the second
    [[ -n $1 ]] && ! grep -qvxF -f <(hosts "$2") <(hosts "$1")
}
disjoint() { # hostlist, hostlist: no node in both
    ! grep -qxF -f <(hosts "$2") <(hosts "$1")
}
# A held job with a 2x1x1 box (one compute node, 3D(1,1)): "job id|what sbatch printed".
submit_held() { # sbatch args...
    local out
    out=$(sbatch --hold -o /dev/null '--spares=3D(1,1)' --job-shape=1x1x1 "$@" --wrap true 2>&1)
    echo "$(sed -n 's/^Submitted batch job \([0-9]*\)$/\1/p' <<<"$out")|$out"
}

SECOND='node[17-32]'
wait_free 32 || fail "the free-node file lists 32 free nodes" "$(cat "$DIR/run/free-nodes")"
node_entries() { # node -> the rest of each free-node file line naming it ("state=... partitions=...")
    local line_hosts rest
    while read -r line_hosts rest; do
        [[ -z $line_hosts || $line_hosts == \#* ]] && continue
        hosts "$line_hosts" | grep -x "$1" >/dev/null && echo "$rest"
    done <"$DIR/run/free-nodes"
}
node17=$(node_entries node17)
if ! grep -qv 'state=free' <<<"$node17" &&
    grep -o 'partitions=[^ ]*' <<<"$node17" | cut -d= -f2 | tr ',' '\n' | sort -u | xargs | grep -qx 'second torus\*'; then
    pass "the free-node file gives states and partitions (node17 in second and in torus*, the default)"
else
    fail "the free-node file gives states and partitions" "$(head -40 "$DIR/run/free-nodes")"
fi

# ------------------------------------------------------------------ boxes where the job asks
r=$(submit_held -p second)
job=${r%%|*}
req=$(job_field "$job" ReqNodeList)
if [[ $job =~ ^[0-9]+$ ]] && within "$req" "$SECOND" && [[ $(job_field "$job" Partition) == second ]] &&
    [[ $r == *"the job gets the 2x1x1 box, 2 nodes, in partition second"* ]]; then
    pass "-p second: the box $req lies in partition second, and sbatch says so"
else
    fail "-p second: the box lies in partition second" "ReqNodeList=$req; $r"
fi
r=$(submit_held)
if [[ ${r%%|*} =~ ^[0-9]+$ && $r == *"the job gets the 2x1x1 box, 2 nodes"* && $r != *"partition"* ]]; then
    pass "no -p: the default partition torus* spans the network, so sbatch names no partition"
else
    fail "no -p: the default partition spans the network" "$r"
fi
# The first boxes of second excluded: the box goes past them.
r=$(submit_held -p second --exclude='node[17-24]')
req=$(job_field "${r%%|*}" ReqNodeList)
if within "$req" 'node[25-32]'; then
    pass "-p second --exclude=node[17-24]: the box $req keeps off the excluded nodes"
else
    fail "-p second --exclude=node[17-24]: the box keeps off them" "ReqNodeList=$req; $r"
fi
r=$(submit_held --exclude='node[01-16]')
req=$(job_field "${r%%|*}" ReqNodeList)
if within "$req" "$SECOND" && disjoint "$req" 'node[01-16]'; then
    pass "--exclude=node[01-16] in the default partition: the box $req"
else
    fail "--exclude=node[01-16]: the box keeps off them" "ReqNodeList=$req; $r"
fi
scancel --quiet --user="$(id -un)"

# A job that runs: -p second --nodelist node22, the box around node22.
cat >job.sh <<'EOF'
#!/bin/bash
echo "nodes=$SLURM_JOB_NODELIST"
srun -N "$SLURM_JOB_NUM_NODES" --ntasks-per-node=1 bash -c 'echo "$SLURMD_NODENAME ${SLURM_SPARES_ROLE:-unset}"' | sort
EOF
chmod +x job.sh
wait_free 32
out=$(sbatch -p second --nodelist=node22 '--spares=3D(1,1)' --job-shape=1x1x1 -o job.out ./job.sh 2>&1)
job=$(sed -n 's/^Submitted batch job \([0-9]*\)$/\1/p' <<<"$out")
if [[ $job =~ ^[0-9]+$ ]]; then
    pass "-p second --nodelist=node22 --spares is accepted (it was refused before)"
    req=$(job_field "$job" ReqNodeList)
    state=$(wait_job "$job" 120)
    if [[ $state == COMPLETED ]] && within node22 "$req" && within "$req" "$SECOND" &&
        grep -q '^node22 ' job.out && grep -q ' compute$' job.out && grep -q ' spare$' job.out; then
        pass "it ran on the box $req holding node22, in second: $(grep -c ' compute$' job.out) compute node, $(grep -c ' spare$' job.out) spare"
    else
        fail "the job ran on a box holding node22 in second" "state=$state ReqNodeList=$req; $(cat job.out)"
    fi
else
    fail "-p second --nodelist=node22 --spares is accepted" "$out"
fi

# ------------------------------------------------------------------ refusals, and what to do
UNAVAILABLE="Requested node configuration is not available"
expect_refused "--nodelist outside the job's partition" \
    "spares: --nodelist names node06, which is not in partition second (sinfo -N -n node06 shows its partitions); name nodes of the partition or submit to one of its partitions" \
    --slurm "$UNAVAILABLE" sbatch -p second --nodelist=node06 '--spares=3D(1,1)' --job-shape=1x1x1 --wrap true
expect_refused "--nodelist too far apart for one box" \
    "spares: no 2x1x1 box of the torus-4x4x2 network holds all of --nodelist node[01,11]: they are too far apart; name nodes that lie in one 2x1x1 box" \
    --slurm "$UNAVAILABLE" sbatch --nodelist=node01,node11 '--spares=3D(1,1)' --job-shape=1x1x1 --wrap true
expect_refused "every box of the partition touches excluded nodes" \
    "spares: every 2x1x1 box in partition second has --exclude'd nodes (node[17-32]); exclude fewer nodes" \
    --slurm "$UNAVAILABLE" sbatch -p second --exclude="$SECOND" '--spares=3D(1,1)' --job-shape=1x1x1 --wrap true
expect_refused "--nodelist not in the topology" \
    "spares: --nodelist names ghost01, not a node of the torus-4x4x2 network" \
    sbatch --nodelist=ghost01 '--spares=3D(1,1)' --job-shape=1x1x1 --wrap true
# With on_no_placement: reject, a node list whose boxes are all busy is refused as busy. The
# job above must have left node[21-22] first, or the busy job waits for a scheduling pass.
wait_free 32
busy=$(sbatch --parsable -p second -w 'node[21-24]' -o /dev/null --wrap 'sleep 60')
busy_on "$busy" node22
SPARES_ON_NO_PLACEMENT=reject "$CLUSTER" policy
expect_refused "no free box around --nodelist, policy reject" \
    "spares: no free 2x1x1 box holding --nodelist in partition second" \
    --slurm "Job can not start immediately" sbatch -p second --nodelist=node22 '--spares=3D(1,1)' --job-shape=1x1x1 --wrap true
"$CLUSTER" policy
scancel --quiet --user="$(id -un)"

# ------------------------------------------------------------------ the site's partitions
# `partitions: [second]` in the policy: a job with spares and no -p goes to second (job_submit
# sets its partition), one in another partition is refused with what to do.
wait_free 32
SPARES_POLICY_EXTRA="partitions: [second]" "$CLUSTER" policy
r=$(submit_held)
job=${r%%|*}
req=$(job_field "$job" ReqNodeList)
if [[ $job =~ ^[0-9]+$ && $(job_field "$job" Partition) == second ]] && within "$req" "$SECOND" &&
    [[ $r == *"the job gets the 2x1x1 box, 2 nodes, in partition second"* ]]; then
    pass "policy partitions: [second]: a job without -p is sent to second, box $req"
else
    fail "policy partitions: [second]: a job without -p is sent to second" "Partition=$(job_field "$job" Partition) ReqNodeList=$req; $r"
fi
expect_refused "policy partitions: [second]: -p torus is refused" \
    "spares: jobs with spares run in partition second on this cluster (the site policy's partitions), not in torus: submit with -p second, or without -p" \
    --slurm "$UNAVAILABLE" sbatch -p torus '--spares=3D(1,1)' --job-shape=1x1x1 --wrap true
plain=$(sbatch --parsable --hold -p torus -o /dev/null --wrap true 2>&1)
if [[ $plain =~ ^[0-9]+$ && $(job_field "$plain" Partition) == torus ]]; then
    pass "policy partitions: [second]: a job without spares stays in torus"
else
    fail "a job without spares is untouched by the policy's partitions" "$plain"
fi
"$CLUSTER" policy
scancel --quiet --user="$(id -un)"
finish
