#!/usr/bin/env bash
# The guides followed literally on the private 4x4x2 torus cluster (tests/cluster/cluster.sh):
# the sbatch commands of docs/user.md that show what sbatch answers run as written, in a
# directory holding a job.sh, on the cluster state the guide describes, and must print that
# answer word for word; the policy snippets of docs/admin.md (boxes with dead nodes, spares by
# failure rate) go into the cluster's policy as written; the `spares policy` commands of both
# guides run as written. A guide that drifts from what the code does fails here.
#
# Followed: `-N` with --spares=auto, the first example, partitions and --exclude, boxes with
# dead nodes (admin's YAML, user's sbatch, `sparesctl show`), spares by failure rate (admin's
# YAML and commands, user's sbatch with --time). The installed policy's path in the guides,
# /etc/slurm/spares.yaml, stands for the cluster's policy file.
#
#   tests/cluster/docs.sh      exit 0 when every check passed; the last line reads
#                              "N passed, M failed" (tests/cluster/lib.sh)
#
# Runs on the host's Slurm release only: the guides' commands are the same on every release,
# and the release-specific behaviour has its own suites. SPARES_KEEP_CLUSTER=1 leaves the
# cluster running.

set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
BIN=${CARGO_TARGET_DIR:-$ROOT/target}/release
USER_GUIDE=$ROOT/docs/user.md
ADMIN_GUIDE=$ROOT/docs/admin.md
# shellcheck source=tests/cluster/lib.sh
. "$HERE/lib.sh"
spares_test_release "$0" "$@"
SPARES_TEST_BUILD="spares-cli sparesd spares-client"
spares_test_start "$0" "$@"
pass "cluster up: 32 nodes idle (Slurm $RELEASE)"
eval "$("$CLUSTER" env)"
POLICY=$DIR/etc/spares.yaml
export SLURM_CONF SPARES_SOCKET SPARES_POLICY=$POLICY PATH=$BIN:$DIR/bin:$PATH
# The guides start from the site policy of the test cluster (a cluster left running may
# hold another).
SPARES_POLICY_EXTRA="" "$CLUSTER" policy
WORK=$(mktemp -d "$DIR/docs.XXXXXX")
cd "$WORK" || exit 1
# The user's own job script, which the guides call job.sh.
printf '#!/bin/bash\nenv | grep ^SLURM_SPARES_ | sort\n' >job.sh

# ------------------------------------------------------------------ reading the guides
block_with() { # guide, fixed text -> the fenced block (without fences) holding a line with it
    awk -v want="$2" '
        /^```/ { if (inside) { if (found) { printf "%s", text; exit } inside = 0 } else { inside = 1; text = ""; found = 0 } next }
        inside { text = text $0 "\n"; if (index($0, want)) found = 1 }
    ' "$1"
}
block_after() { # guide, fixed text -> the first fenced block after the one holding it
    awk -v want="$2" '
        /^```/ { if (inside) { if (state == 2) { printf "%s", text; exit } if (found) state = 2; inside = 0 } else { inside = 1; text = "" } next }
        inside { text = text $0 "\n"; if (state == 0 && index($0, want)) found = 1 }
    ' "$1"
}
command_in() { # block, command prefix -> the first line starting with it
    awk -v prefix="$2" 'index($0, prefix) == 1 { print; exit }' <<<"$1"
}
shown_after() { # block, command line -> the "# sbatch: spares: ..." line under it, without "# "
    awk -v cmd="$2" 'seen { if (sub(/^# /, "")) print; exit } $0 == cmd { seen = 1 }' <<<"$1"
}

# Runs an sbatch line of a guide as written; prints the job id ("Submitted batch job N"),
# leaves sbatch's stderr in $WORK/submit.txt.
submit_as_written() { # command line
    bash -c "$1" 2>"$WORK/submit.txt" | sed -n 's/^Submitted batch job \([0-9]*\)$/\1/p'
}
spares_line() { grep -m1 '^sbatch: spares: ' "$WORK/submit.txt"; }
# One example: the command of the guide's block, run as written, must print the answer the
# guide shows and the job must complete. Prints the job id.
follow() { # what, command line, answer shown in the guide
    local what=$1 cmd=$2 want=$3 job state
    if [[ -z $cmd || -z $want ]]; then
        fail "$what: the guide shows a command and sbatch's answer" "command '$cmd', answer '$want'"
        return 1
    fi
    job=$(submit_as_written "$cmd")
    if [[ $job =~ ^[0-9]+$ && $(spares_line) == "$want" ]]; then
        pass "$what: \`$cmd\` answers as the guide shows"
    else
        fail "$what: \`$cmd\` answers as the guide shows" "want: $want
got:  $(cat "$WORK/submit.txt")"
        return 1
    fi
    state=$(wait_job "$job" 120)
    if [[ $state == COMPLETED ]] && grep -q '^SLURM_SPARES_HOSTFILE=' "$WORK/slurm-$job.out"; then
        pass "$what: job $job completed with its map (SLURM_SPARES_HOSTFILE set)"
    else
        fail "$what: job $job completed with its map" "state $state; $(cat "$WORK/slurm-$job.out" 2>/dev/null)"
    fi
    echo "$job" >"$WORK/last-job"
}

# ------------------------------------------------------------------ -N alone
block=$(block_with "$USER_GUIDE" "sbatch -N 18 --no-kill --spares=auto job.sh")
cmd=$(command_in "$block" "sbatch -N 18 ")
follow "user's guide, -N alone" "$cmd" "$(shown_after "$block" "$cmd")"
wait_free 32

# ------------------------------------------------------------------ the first example
block=$(block_with "$USER_GUIDE" "--job-shape=3x3x2 job.sh")
cmd=$(command_in "$block" "sbatch --no-kill --spares='3D(2,1)' --job-shape=3x3x2")
follow "user's guide, the first example" "$cmd" "$(block_after "$USER_GUIDE" "--job-shape=3x3x2 job.sh" | head -1)"
wait_free 32

# ------------------------------------------------------------------ partitions, --exclude
block=$(block_with "$USER_GUIDE" "sbatch -p second --exclude=")
cmd=$(command_in "$block" "sbatch -p second --exclude=")
follow "user's guide, -p and --exclude" "$cmd" "$(shown_after "$block" "$cmd")"
wait_free 32

# ------------------------------------------------------------------ boxes with dead nodes
# The administrator's snippet, as written, then two nodes DOWN: no box of free nodes is left.
snippet=$(block_with "$ADMIN_GUIDE" "max_unusable_nodes_at_start: 2")
if [[ -n $snippet ]]; then
    SPARES_POLICY_EXTRA=$snippet "$CLUSTER" policy
    pass "admin's guide: the worm-eaten snippet in the policy: $(paste -sd' ' <<<"$snippet" | tr -s ' ')"
else
    fail "admin's guide shows the worm-eaten policy snippet" "no block with max_unusable_nodes_at_start: 2"
fi
scontrol update nodename=node01,node06 state=down reason=docs-test
end=$((SECONDS + 30))
until listed_as node01 unusable && listed_as node06 unusable; do
    ((SECONDS < end)) || break
    sleep 0.3
done
block=$(block_with "$USER_GUIDE" "node[01,06] of the box cannot be used")
cmd=$(command_in "$block" "sbatch ")
follow "user's guide, boxes with dead nodes" "$cmd" "$(shown_after "$block" "$cmd")"
job=$(cat "$WORK/last-job" 2>/dev/null)
show=$(sparesctl show "$job" 2>&1)
if grep -qx 'failed at start: node01, node06' <<<"$show"; then
    pass "user's guide: sparesctl show $job says 'failed at start: node01, node06'"
else
    fail "user's guide: sparesctl show says 'failed at start: node01, node06'" "$show"
fi
scontrol update nodename=node01,node06 state=resume
wait_free 32

# ------------------------------------------------------------------ spares by failure rate
snippet=$(block_with "$ADMIN_GUIDE" "failure_rate: {")
if [[ -n $snippet ]]; then
    SPARES_POLICY_EXTRA=$snippet "$CLUSTER" policy
    pass "admin's guide: the failure-rate snippet in the policy: $snippet"
else
    fail "admin's guide shows the failure-rate policy snippet" "no block with failure_rate: {"
fi
# Both guides' `spares policy` commands, as written (the installed policy's path read as the
# cluster's): each must answer with its table.
commands=$({
    block_with "$ADMIN_GUIDE" "spares policy --policy /etc/slurm/spares.yaml"
    block_with "$USER_GUIDE" "spares policy --mtbf"
} | sed -n 's/^\(spares policy[^#]*\).*/\1/p' | sed 's/ *$//')
n=0
while read -r cmd; do
    [[ -n $cmd ]] || continue
    n=$((n + 1))
    out=$(bash -c "${cmd//\/etc\/slurm\/spares.yaml/$POLICY}" 2>&1)
    rc=$?
    if ((rc == 0)) && grep -q '3D(' <<<"$out"; then
        pass "\`$cmd\`: $(grep -m1 -i 'failure\|mtbf\|rate' <<<"$out" | cut -c1-110)"
    else
        fail "\`$cmd\` answers with its table" "rc=$rc: $out"
    fi
done <<<"$commands"
((n >= 4)) || fail "the guides show the spares policy commands" "found $n: $commands"
# The user's side: --spares=auto with --time under that policy.
block=$(block_with "$USER_GUIDE" "--spares=auto --time=2-00:00:00 job.sh")
cmd=$(command_in "$block" "sbatch ")
follow "user's guide, spares by failure rate" "$cmd" "$(shown_after "$block" "$cmd")"

SPARES_POLICY_EXTRA="" "$CLUSTER" policy
cd / || true
finish
