#!/usr/bin/env bash
# Installs what a fresh Debian 12 machine lacks to build and test spares: C toolchain, libclang
# for bindgen, Slurm 22.05 (controller, node daemon, client, headers) and MUNGE (daemon and
# libmunge-dev, which sparesd links for its TCP listener), and what packaging/build-debs.sh and
# tests/install/install.sh use (dpkg-dev, help2man, man-db), jq for the end-to-end test, and MPICH
# for tests/cluster/mpi.sh (srun --mpi=pmi2), scotch for scripts/bench-remap.sh, and debootstrap
# and zstd for the root filesystems of the other Slurm releases (tests/cluster/rootfs.sh) with
# iproute2 for their containers (tests/cluster/box.sh). Idempotent: packages already present are
# not fetched again.
set -euo pipefail

need=()
for pkg in build-essential pkg-config libclang-dev debootstrap zstd iproute2 slurmctld slurmd slurm-client libslurm-dev munge libmunge-dev fonts-dejavu-core dpkg-dev help2man man-db jq mpich libmpich-dev scotch; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
    if [ "$(id -u)" -ne 0 ]; then
        echo "setup: missing packages ${need[*]}; run as root or install them" >&2
        exit 1
    fi
    echo "setup: installing ${need[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

if ! command -v cargo >/dev/null 2>&1; then
    echo "setup: cargo is missing; install a Rust toolchain (1.75 or newer)" >&2
    exit 1
fi
