#!/usr/bin/env bash
# A queue of jobs with spares drains: on a busy cluster (a job without spares holds node07,
# inside every box) ten jobs with --spares=3D(2,1) --job-shape=3x3x2 are pinned to the one
# 4x4x2 box (policy on_no_placement: wait). Each must start within seconds of the box freeing,
# in submission order; none may stay pending on idle nodes.
#
#   tests/cluster/queue.sh [--slurm RELEASE]   exit 0 when every check passed; last line
#                                              "N passed, M failed" (tests/cluster/lib.sh)
set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=tests/cluster/lib.sh
. "$HERE/lib.sh"
spares_test_release "$0" "$@"
SPARES_TEST_BUILD="sparesd spares-client"
spares_test_start "$0" "$@"
pass "cluster up: 32 nodes idle (Slurm $RELEASE)"
WORK=$(mktemp -d "$DIR/queue.XXXXXX")
cd "$WORK" || exit 1
JOBS=10
# The largest wait between the box freeing and the next job starting, in seconds.
MAX_GAP=8

field() { scontrol show job -o "$1" 2>/dev/null | tr ' ' '\n' | sed -n "s/^$2=//p" | head -1; }
epoch() { date -d "$1" +%s 2>/dev/null || echo 0; }

busy=$(sbatch --parsable -w node07 -o /dev/null --wrap 'sleep 10')
for _ in $(seq 50); do [[ $(field "$busy" JobState) == RUNNING ]] && break; sleep 0.2; done
ids=()
for i in $(seq "$JOBS"); do
    # sbatch tells the user what the job gets on stderr; the job id is stdout's.
    id=$(sbatch --parsable --spares='3D(2,1)' --job-shape=3x3x2 -o /dev/null --wrap 'sleep 1' 2>sbatch.err)
    [[ $id =~ ^[0-9]+$ ]] || { fail "submission $i" "$id $(cat sbatch.err)"; break; }
    ids+=("$id")
done
((${#ids[@]} == JOBS)) && pass "$JOBS jobs with spares submitted behind job $busy (node07 busy)"

end=$((SECONDS + 10 + JOBS * 12))
while ((SECONDS < end)); do
    left=$(squeue -h -j "$(IFS=,; echo "${ids[*]}")" 2>/dev/null | grep -c .)
    ((left == 0)) && break
    sleep 1
done
states=$(for id in "${ids[@]}"; do field "$id" JobState; done | sort | uniq -c | xargs)
if [[ $states == "$JOBS COMPLETED" ]]; then
    pass "all $JOBS jobs completed ($states)"
else
    fail "all $JOBS jobs completed within $((10 + JOBS * 12)) s" "$states; $(squeue 2>&1 | head -15)"
fi

# In order, each within MAX_GAP s of the previous one's end (the first: of the busy job's).
if [[ $states != "$JOBS COMPLETED" ]]; then
    fail "start times and order (not every job completed)"
    finish
    exit
fi
prev_end=$(epoch "$(field "$busy" EndTime)")
worst=0 order_ok=1 prev_start=0 report=
for id in "${ids[@]}"; do
    start=$(epoch "$(field "$id" StartTime)")
    gap=$((start - prev_end))
    ((gap > worst)) && worst=$gap
    ((start >= prev_start)) || order_ok=0
    report+="$id: start +$gap s; "
    prev_start=$start
    prev_end=$(epoch "$(field "$id" EndTime)")
done
if ((worst <= MAX_GAP)); then
    pass "each job started within $worst s of the box freeing (at most $MAX_GAP)"
else
    fail "each job starts within $MAX_GAP s of the box freeing" "$report"
fi
if ((order_ok)); then pass "the jobs started in submission order"; else fail "submission order" "$report"; fi
finish
