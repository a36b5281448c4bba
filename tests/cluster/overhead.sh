#!/usr/bin/env bash
# Overhead of the spares plugins, on the private cluster (tests/cluster/cluster.sh), in one
# run:
#   with:    sbatch --hold --spares=3D(1,1) --job-shape=1x1x1 --wrap true
#            (SPANK option check in sbatch; in slurmctld: policy, placement on the
#            free-node file, padding and pinning)
#   plain:   sbatch --hold --wrap true, plugins loaded (the cost every job without --spares
#            pays)
#   without: sbatch --hold --wrap true through a copy of slurm.conf whose plugstack.conf is
#            empty: sbatch loads no SPANK plugin; slurmctld (the same process) still calls
#            job_submit_spares, which returns at once for a job without spares options
# The three kinds are submitted in turns (with, plain, without, with, ...), N of each, and
# each submission is timed on its own: the machine's load drifts (other builds, the queue
# that grows by 3 N held jobs) and a run of one kind after the other measured the drift as
# overhead. Jobs are held so that nothing runs; they are cancelled at the end. Prints the
# total and median per kind, the ratios, and what job_submit_spares itself took inside
# slurmctld (its "decided in N us" log lines).
#
# Then the SPANK plugin's cost per task launch: M x `srun -N1 true` in a held-free
# allocation with spares (the step reads the job's map files and sets SLURM_SPARES_*) and in
# one without (the plugin is loaded and returns), in turns.
#
#   tests/cluster/overhead.sh [N [M]]     (default 200 and 50; M=0 skips the launches; not
#                                         part of scripts/test.sh)
set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CLUSTER=$HERE/cluster.sh
DIR=${SPARES_CLUSTER_DIR:-/tmp/spares-cluster}
export SPARES_CLUSTER_DIR=$DIR
N=${1:-200}
M=${2:-50}

started=0
if ! "$CLUSTER" status >/dev/null 2>&1; then
    "$CLUSTER" up >/dev/null || exit 1
    started=1
fi
trap '[[ $started == 1 ]] && "$CLUSTER" down >/dev/null 2>&1' EXIT
export SLURM_CONF=$DIR/etc/slurm.conf
: >"$DIR/etc/plugstack-empty.conf"
sed "s|^PlugStackConfig=.*|PlugStackConfig=$DIR/etc/plugstack-empty.conf|" "$SLURM_CONF" >"$DIR/etc/slurm-noplugin.conf"
LOG=$DIR/log/slurmctld.log
log_start=$(wc -l <"$LOG")
WORK=$(mktemp -d "$DIR/overhead.XXXXXX")

now_ns() { date +%s%N; }
one() { # file, conf, sbatch args...: one timed submission, its nanoseconds appended to file
    local file=$1 conf=$2 t0 t1
    shift 2
    t0=$(now_ns)
    SLURM_CONF=$conf sbatch --hold -Q -o /dev/null "$@" --wrap true >/dev/null || {
        echo "overhead: sbatch $* failed" >&2
        exit 1
    }
    t1=$(now_ns)
    echo $((t1 - t0)) >>"$file"
}
for ((i = 0; i < N; i++)); do
    one "$WORK/with" "$SLURM_CONF" '--spares=3D(1,1)' --job-shape=1x1x1
    one "$WORK/plain" "$SLURM_CONF"
    one "$WORK/without" "$DIR/etc/slurm-noplugin.conf"
done
scancel --quiet --user="$(id -un)"
stats() { # file -> "total_s median_ms"
    sort -n "$1" | awk '{ v[NR] = $1; s += $1 } END { printf "%.3f %.3f", s / 1e9, v[int((NR + 1) / 2)] / 1e6 }'
}
read -r wt wm <<<"$(stats "$WORK/with")"
read -r pt pm <<<"$(stats "$WORK/plain")"
read -r ot om <<<"$(stats "$WORK/without")"
echo "$N submissions of each kind, in turns (total s / median ms per submission):"
echo "  with --spares:                 $wt / $wm"
echo "  plain job, plugins loaded:     $pt / $pm"
echo "  without the SPANK plugin:      $ot / $om"
awk -v w="$wt" -v p="$pt" -v o="$ot" -v wm="$wm" -v pm="$pm" -v om="$om" 'BEGIN {
    printf "ratio with --spares / without the plugin: %.3f (medians %.3f); plain / without: %.3f (medians %.3f)\n", w / o, wm / om, p / o, pm / om
}'
tail -n +"$((log_start + 1))" "$LOG" | sed -n 's/.*(decided in \([0-9]*\) us).*/\1/p' | sort -n |
    awk '{ v[NR] = $1 } END { if (NR) printf "job_submit_spares inside slurmctld, %d jobs with spares: median %d us, max %d us\n", NR, v[int((NR + 1) / 2)], v[NR] }'

# ------------------------------------------------------------------ per task launch
launch() { # label, job id: M timed `srun --jobid=ID -N1 true`, nanoseconds appended
    local t0 t1
    t0=$(now_ns)
    srun --jobid="$2" --overlap -N1 -n1 true || { echo "overhead: srun in job $2 failed" >&2; exit 1; }
    t1=$(now_ns)
    echo $((t1 - t0)) >>"$WORK/$1"
}
alloc() { # sbatch args... -> id of a running job that sleeps
    local id
    id=$(sbatch --parsable -o /dev/null "$@" --wrap 'sleep 600' 2>/dev/null) || return 1
    for _ in $(seq 100); do
        [[ $(squeue -h -j "$id" -o %T) == RUNNING ]] && break
        sleep 0.2
    done
    echo "$id"
}
((M > 0)) || { rm -rf "$WORK"; exit 0; }
spares_job=$(alloc '--spares=3D(1,1)' --job-shape=1x1x1)
plain_job=$(alloc -N1)
if [[ -n $spares_job && -n $plain_job ]]; then
    for ((i = 0; i < M; i++)); do
        launch spares-step "$spares_job"
        launch plain-step "$plain_job"
    done
    read -r st sm <<<"$(stats "$WORK/spares-step")"
    read -r qt qm <<<"$(stats "$WORK/plain-step")"
    echo "$M task launches each, in turns (median ms): in a job with spares $sm, in a job without $qm"
    awk -v a="$sm" -v b="$qm" 'BEGIN { printf "SPANK plugin per task launch (the job'"'"'s map files, SLURM_SPARES_*): %+.2f ms (ratio %.3f)\n", a - b, a / b }'
fi
scancel --quiet "$spares_job" "$plain_job" 2>/dev/null
rm -rf "$WORK"
