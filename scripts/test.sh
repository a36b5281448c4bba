#!/usr/bin/env bash
# Runs every test of the project: the Rust workspace (unit, property, seed-fact and CLI tests),
# then the tests on a real local Slurm cluster (installs what is missing, needs root), then the
# install test of the Debian packages.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh

echo "== cargo test (workspace)"
cargo test --workspace --all-targets
tests/fuzz.sh  # every parser a user or a file reaches, 20 s each (SPARES_FUZZ_SECONDS)

if [ -x tests/cluster/smoke.sh ]; then
    echo "== Slurm cluster tests"
    tests/cluster/smoke.sh
    echo "== Slurm plugin tests (padding, placement, spare map, rejections, robustness)"
    tests/cluster/plugins.sh
    echo "== End to end: a stencil job loses three nodes and finishes on its spares with the same checksum"
    tests/cluster/e2e.sh
    echo "== MPI: the seeds' halo measurement under srun --mpi=pmi2 on a map before and after a failure"
    tests/cluster/mpi.sh
    echo "== A simulation campaign as a Slurm job array, merged (configs/simulate-array.sbatch)"
    tests/cluster/simulate-array.sh
fi

# Installs the Debian packages on this machine and purges them again (root; about 5 minutes).
if [ "${SPARES_SKIP_INSTALL_TEST:-0}" != 1 ] && [ -x tests/install/install.sh ]; then
    echo "== install test (Debian packages; SPARES_SKIP_INSTALL_TEST=1 skips it)"
    tests/install/install.sh
fi
