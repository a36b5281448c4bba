#!/usr/bin/env bash
# Overhead of the spares plugins at submission, on the private cluster
# (tests/cluster/cluster.sh), in one run:
#   with:    N x sbatch --hold --spares=3D(1,1) --job-shape=1x1x1 --wrap true
#            (SPANK option check in sbatch; in slurmctld: policy, placement on
#            the free-node file, padding and pinning)
#   plain:   N x sbatch --hold --wrap true, plugins loaded (the cost every
#            job without --spares pays)
#   without: N x sbatch --hold --wrap true through a copy of slurm.conf whose
#            plugstack.conf is empty: sbatch loads no SPANK plugin; slurmctld
#            (the same process) still calls job_submit_spares, which returns
#            at once for a job without spares options
# Jobs are held so that nothing runs and the runs measure submission only;
# they are cancelled at the end. Prints the times and the ratio with/without.
#
#   tests/cluster/overhead.sh [N]     (default 200; not part of scripts/test.sh)
set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CLUSTER=$HERE/cluster.sh
DIR=${SPARES_CLUSTER_DIR:-/tmp/spares-cluster}
export SPARES_CLUSTER_DIR=$DIR
N=${1:-200}

started=0
if ! "$CLUSTER" status >/dev/null 2>&1; then
    "$CLUSTER" up >/dev/null || exit 1
    started=1
fi
trap '[[ $started == 1 ]] && "$CLUSTER" down >/dev/null 2>&1' EXIT
export SLURM_CONF=$DIR/etc/slurm.conf
: >"$DIR/etc/plugstack-empty.conf"
sed "s|^PlugStackConfig=.*|PlugStackConfig=$DIR/etc/plugstack-empty.conf|" "$SLURM_CONF" >"$DIR/etc/slurm-noplugin.conf"

run() { # label, conf, sbatch args...
    local label=$1 conf=$2 t0 t1 i
    shift 2
    t0=$(date +%s.%N)
    for ((i = 0; i < N; i++)); do
        SLURM_CONF=$conf sbatch --hold -Q -o /dev/null "$@" --wrap true >/dev/null || {
            echo "overhead: $label: sbatch failed" >&2
            exit 1
        }
    done
    t1=$(date +%s.%N)
    echo "$label $(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')"
}

with=$(run with "$SLURM_CONF" '--spares=3D(1,1)' --job-shape=1x1x1)
plain=$(run plain "$SLURM_CONF")
without=$(run without "$DIR/etc/slurm-noplugin.conf")
scancel --quiet --user="$(id -un)"
w=${with#* } p=${plain#* } o=${without#* }
printf '%d submissions each (s): with --spares %.2f, plain job (plugins loaded) %.2f, without the SPANK plugin %.2f\n' "$N" "$w" "$p" "$o"
awk -v w="$w" -v p="$p" -v o="$o" -v n="$N" 'BEGIN {
    printf "per submission (ms): %.2f / %.2f / %.2f\n", w * 1000 / n, p * 1000 / n, o * 1000 / n
    printf "ratio with --spares / without the plugin: %.2f; plain job with / without the plugin: %.2f\n", w / o, p / o
}'
