#!/usr/bin/env bash
# Runs every test of the project: the Rust workspace (unit, property, seed-fact and CLI tests),
# then the tests on a real local Slurm cluster (installs what is missing, needs root): on the
# host's Slurm 22.05, then on Slurm 24.11 and 26.05 each in a container of its own Debian root
# filesystem (tests/cluster/releases.sh; the root filesystems are cached in
# /var/cache/spares-test, SPARES_CACHE_DIR), then the install test of the Debian packages.
# Ends with a tally per Slurm release; exits non-zero if any suite failed.
#
#   SPARES_SKIP_RELEASES=1      only the host's Slurm (no containers)
#   SPARES_SKIP_INSTALL_TEST=1  no install test
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh

echo "== cargo test (workspace)"
cargo test --workspace --all-targets
tests/fuzz.sh  # every parser a user or a file reaches, 20 s each (SPARES_FUZZ_SECONDS)

# One cluster suite: its output as it runs, and its "N passed, M failed" line kept for the
# tally of its release. A failed suite does not stop the others.
declare -A tally
failed_suites=()
total_passed=0
total_failed=0
suite() { # release name command...
    local release=$1 name=$2 log last rc=0
    shift 2
    log=$(mktemp)
    "$@" 2>&1 | tee "$log" || rc=$?
    last=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$log" | tail -1 || true)
    # A suite that does not apply to a release says why on a "SKIP name: why" line.
    [[ -n $last || $rc != 0 ]] || last=$(grep -m1 '^SKIP ' "$log" | sed 's/^SKIP [^:]*: /skipped: /' || true)
    rm -f "$log"
    ((rc == 0)) || failed_suites+=("$release $name")
    if [[ $last =~ ^([0-9]+)\ passed,\ ([0-9]+)\ failed ]]; then
        total_passed=$((total_passed + BASH_REMATCH[1]))
        total_failed=$((total_failed + BASH_REMATCH[2]))
    fi
    tally[$release]+="  $name: ${last:-no result (exit $rc)}"$'\n'
}

if [ -x tests/cluster/smoke.sh ]; then
    echo "== Slurm cluster tests"
    suite 22.05 smoke tests/cluster/smoke.sh
    echo "== Slurm plugin tests (padding, placement, spare map, rejections, robustness)"
    suite 22.05 plugins tests/cluster/plugins.sh
    echo "== SLURM_SPARES_* in srun --jobid and salloc, sparesctl map, the history after scancel"
    suite 22.05 steps tests/cluster/steps.sh
    echo "== A queue of ten jobs with spares behind a busy node drains in order"
    suite 22.05 queue tests/cluster/queue.sh
    echo "== A pending job with spares moves off a box that lost a node (spares-free-nodes)"
    suite 22.05 pending tests/cluster/pending.sh
    echo "== Scheduling: -N with --spares=auto, -N against --job-shape, every refusal's Slurm text, failure-rate sizing"
    suite 22.05 sched tests/cluster/sched.sh
    echo "== Partitions, --exclude and --nodelist with spares (the free-node file's partitions)"
    suite 22.05 partitions tests/cluster/partitions.sh
    echo "== Boxes with dead nodes at start: two DOWN nodes substituted before the job starts, same checksum"
    suite 22.05 worm tests/cluster/worm.sh
    echo "== The guides followed literally: docs/user.md's sbatch examples answer as shown, docs/admin.md's policy snippets"
    suite 22.05 docs tests/cluster/docs.sh
    echo "== End to end: a stencil job loses three nodes and finishes on its spares with the same checksum"
    suite 22.05 e2e tests/cluster/e2e.sh
    echo "== End to end with re-mapping at relaunch (sparesd's [remap] at_relaunch): the same checksum"
    suite 22.05 e2e-remap tests/cluster/e2e-remap.sh
    echo "== MPI: the seeds' halo measurement under srun --mpi=pmi2 on a map before and after a failure"
    suite 22.05 mpi tests/cluster/mpi.sh
    echo "== A simulation campaign as a Slurm job array, merged (configs/simulate-array.sbatch)"
    suite 22.05 simulate-array tests/cluster/simulate-array.sh

    if [ "${SPARES_SKIP_RELEASES:-0}" != 1 ]; then
        for release in 24.11 26.05; do
            echo "== Slurm $release in a container: root filesystem, plugins from its headers"
            time tests/cluster/rootfs.sh "$release" >/dev/null
            echo "== Slurm $release: smoke tests"
            suite "$release" smoke tests/cluster/smoke.sh --slurm "$release"
            echo "== Slurm $release: plugin tests"
            suite "$release" plugins tests/cluster/plugins.sh --slurm "$release"
            echo "== Slurm $release: steps outside the batch script, salloc, sparesctl map"
            suite "$release" steps tests/cluster/steps.sh --slurm "$release"
            suite "$release" queue tests/cluster/queue.sh --slurm "$release"
            suite "$release" pending tests/cluster/pending.sh --slurm "$release"
            echo "== Slurm $release: scheduling (-N with --spares=auto, refusals, failure-rate sizing)"
            suite "$release" sched tests/cluster/sched.sh --slurm "$release"
            suite "$release" partitions tests/cluster/partitions.sh --slurm "$release"
            suite "$release" worm tests/cluster/worm.sh --slurm "$release"
            echo "== Slurm $release: MPI (MPICH of the release, srun --mpi=pmi2)"
            suite "$release" mpi tests/cluster/mpi.sh --slurm "$release"
            echo "== Slurm $release: end to end (three nodes die, the same checksum)"
            suite "$release" e2e tests/cluster/e2e.sh --slurm "$release"
            echo "== Slurm $release: native placement on topology/torus3d (skipped before 26.05)"
            suite "$release" torus3d tests/cluster/torus3d.sh --slurm "$release"
        done
        echo "== A plugin built for 22.05 is refused on 24.11 and 26.05 (check, packages, cluster start)"
        suite 24.11+26.05 release-check tests/cluster/release-check.sh
    fi
fi

# Installs the Debian packages on this machine and purges them again (root; about 5 minutes).
if [ "${SPARES_SKIP_INSTALL_TEST:-0}" != 1 ] && [ -x tests/install/install.sh ]; then
    echo "== install test (Debian packages; SPARES_SKIP_INSTALL_TEST=1 skips it)"
    suite 22.05 install tests/install/install.sh
    if [ "${SPARES_SKIP_RELEASES:-0}" != 1 ]; then
        for release in 24.11 26.05; do
            echo "== install test in Debian's Slurm $release (the packages with its plugins, its apt, a box)"
            # The host's install test built target/release, the release suites the plugins.
            SPARES_DEBS_SKIP_BUILD=1 suite "$release" install tests/install/install.sh --slurm "$release"
        done
    fi
fi

if ((${#tally[@]})); then
    echo "== Tally per Slurm release"
    for release in $(printf '%s\n' "${!tally[@]}" | sort); do
        echo "Slurm $release:"
        printf '%s' "${tally[$release]}"
    done
    echo "clusters: $total_passed passed, $total_failed failed"
fi
if ((${#failed_suites[@]})); then
    echo "FAILED: ${failed_suites[*]}" >&2
    exit 1
fi
