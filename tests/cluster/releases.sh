# shellcheck shell=bash
# The Slurm releases the tests run on, and everything that differs between them: the one place
# to change when Debian moves a suite to another Slurm. Sourced by cluster.sh, rootfs.sh,
# box.sh, lib.sh and packaging/build-debs.sh.
#
#   release_vars RELEASE   sets RELEASE, SUITE (Debian suite of the root filesystem, "host" for
#                          the machine's own Slurm), SLURM_DEB_PREFIX (the Debian version of
#                          slurmctld the suite must have), SPARES_RELEASE_TAG (2411 ...) and
#                          SLURM_READS_TOPOLOGY_YAML (1 if slurmctld loads a topology.yaml
#                          next to slurm.conf: 26.05 then runs topology/torus3d) and
#                          SLURMD_TIMEOUT (the cluster's failure detection time: with 5 s a
#                          24.11 slurmctld declared every node of the box failed at once
#                          while the machine was loaded, load average 10 on 2 cores)

# The releases scripts/test.sh runs, in order. 22.05 is the host's (Debian 12).
SPARES_RELEASES="22.05 24.11 26.05"

release_vars() {
    RELEASE=${1:-22.05}
    case $RELEASE in
        22.05 | host) RELEASE=22.05 SUITE=host SLURM_DEB_PREFIX=22.05. SLURM_READS_TOPOLOGY_YAML=0 SLURMD_TIMEOUT=5 ;;
        24.11) SUITE=trixie SLURM_DEB_PREFIX=24.11. SLURM_READS_TOPOLOGY_YAML=0 SLURMD_TIMEOUT=10 ;;
        26.05) SUITE=sid SLURM_DEB_PREFIX=26.05. SLURM_READS_TOPOLOGY_YAML=1 SLURMD_TIMEOUT=10 ;;
        *)
            echo "unknown Slurm release '$RELEASE' (known: $SPARES_RELEASES)" >&2
            return 2
            ;;
    esac
    SPARES_RELEASE_TAG=${RELEASE/./}
}
