#!/usr/bin/env bash
# Builds the Debian packages of spares from this workspace with dpkg-deb (no debhelper, no
# cargo-deb: only what Debian 12's dpkg-dev and the Rust toolchain already give).
#
#   packaging/build-debs.sh [OUTDIR]      default OUTDIR: target/debian
#   packaging/build-debs.sh --slurm RELEASE [OUTDIR]
#       only slurm-spares-plugins, for another Slurm release (24.11, 26.05): built from that
#       release's headers in its root filesystem (tests/cluster/rootfs.sh) and depending on
#       its exact upstream version there; version VERSION-N+slurmX.Y.Z, default OUTDIR
#       target/debian/slurm-RELEASE. The other packages do not depend on Slurm: build them
#       once, without --slurm. --slurm 22.05: the same package for the host's Slurm.
#
# Packages (one .deb each, VERSION from Cargo.toml, Debian revision 1):
#   spares                 the CLI, its man pages, bash/zsh/fish completions, the guides,
#                          docs/simulation.md and the job array example simulate-array.sbatch
#   slurm-spares-plugins   spank_spares.so and job_submit_spares.so in Slurm's plugin
#                          directory, /etc/slurm/plugstack.conf.d/spares.conf, the policy
#                          /etc/slurm/spares.yaml and topology /etc/slurm/spares-topology.yaml
#                          (conffiles), the free-node script and its unit; depends on the Slurm
#                          version the plugins were built against
#   sparesd                the daemon, sparesctl, sparesd-node-down, the systemd unit, the
#                          system user sparesd, /etc/spares/sparesd.toml (conffile)
#   spares-examples        spares-run (the launcher), spares-stencil and spares-halo-bench
#                          (examples/stencil), man spares-run, examples/README.md
#   libspares0             libspares.so.0
#   libspares-dev          spares.h, libspares.so, libspares.a, spares.pc
#
# Environment:
#   SPARES_SKIP_BUILD=1       package what is in target/release (no cargo build)
#   SPARES_DEB_REVISION=N     Debian revision (default 1); the install test bumps it to test
#                             an upgrade
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PKG=$ROOT/packaging
# shellcheck source=tests/cluster/releases.sh
. "$ROOT/tests/cluster/releases.sh"
ONLY_PLUGINS=0 # --slurm: slurm-spares-plugins for that release, nothing else
if [[ ${1:-} == --slurm ]]; then
    release_vars "${2:?--slurm needs a release}" || exit 2
    ONLY_PLUGINS=1
    shift 2
else
    release_vars 22.05
fi
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}/release
REVISION=${SPARES_DEB_REVISION:-1}
if ((ONLY_PLUGINS)); then
    OUT=${1:-$ROOT/target/debian/slurm-$RELEASE}
else
    OUT=${1:-$ROOT/target/debian}
fi
SYSROOT= # Slurm's headers and packages: the host's, or the release's root filesystem
[[ $SUITE == host ]] || SYSROOT=$("$ROOT/tests/cluster/rootfs.sh" "$RELEASE")
INCLUDE=$SYSROOT/usr/include
DPKG_ADMIN=(--admindir="$SYSROOT/var/lib/dpkg")

log() { printf 'build-debs: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

for tool in dpkg-deb dpkg-shlibdeps dpkg-architecture strip; do
    command -v "$tool" >/dev/null ||
        die "$tool is missing: run scripts/setup.sh (or apt-get install dpkg-dev binutils)"
done
[[ -e $INCLUDE/slurm/slurm_version.h ]] ||
    die "$INCLUDE/slurm/slurm_version.h is missing: apt-get install libslurm-dev"

UPSTREAM=$(sed -n '/^\[workspace.package\]/,/^\[/s/^version *= *"\(.*\)"/\1/p' "$ROOT/Cargo.toml")
[[ -n $UPSTREAM ]] || die "no version in [workspace.package] of $ROOT/Cargo.toml"
VERSION=$UPSTREAM-$REVISION
ARCH=$(dpkg --print-architecture)
MULTIARCH=$(dpkg-architecture -qDEB_HOST_MULTIARCH)

# The Slurm the plugins are built against: the headers' version. job_submit plugins must
# declare exactly SLURM_VERSION_NUMBER and SPANK plugins its major.minor, so the package
# accepts every Debian revision of that upstream version (security updates keep it) and no
# other upstream version: >= X.Y.Z and << X.Y.Z+1.
hex=$(sed -n 's/^#define SLURM_VERSION_NUMBER 0x\([0-9a-fA-F]*\).*/\1/p' "$INCLUDE/slurm/slurm_version.h")
[[ -n $hex ]] || die "no SLURM_VERSION_NUMBER in $INCLUDE/slurm/slurm_version.h"
SLURM_VERSION=$((16#$hex >> 16)).$(printf %02d $(((16#$hex >> 8) & 255))).$((16#$hex & 255))
SLURM_NEXT=$((16#$hex >> 16)).$(printf %02d $(((16#$hex >> 8) & 255))).$(((16#$hex & 255) + 1))
# The package that owns Slurm's plugin directory on Debian (every Slurm daemon and client
# depends on it), and the directory itself.
SLURM_PLUGINS_PKG=slurm-wlm-basic-plugins
installed=$(dpkg-query "${DPKG_ADMIN[@]}" -W -f='${Version}' "$SLURM_PLUGINS_PKG" 2>/dev/null) ||
    die "$SLURM_PLUGINS_PKG is not installed: apt-get install $SLURM_PLUGINS_PKG libslurm-dev"
[[ ${installed%%-*} == "$SLURM_VERSION" ]] ||
    die "the Slurm headers are $SLURM_VERSION but $SLURM_PLUGINS_PKG is $installed: install matching libslurm-dev and Slurm"
PLUGINDIR=$(dpkg-query "${DPKG_ADMIN[@]}" -L "$SLURM_PLUGINS_PKG" | sed -n 's|/select_linear\.so$||p' | head -n1)
[[ -n $PLUGINDIR ]] || die "cannot find Slurm's plugin directory (select_linear.so) in dpkg -L $SLURM_PLUGINS_PKG"
SLURM_DEPENDS="$SLURM_PLUGINS_PKG (>= $SLURM_VERSION), $SLURM_PLUGINS_PKG (<< $SLURM_NEXT~)"
# The plugins: the host build, or for another release its own build (scripts/build-plugins.sh).
SPANK_SO=$TARGET/libspank_spares.so
JOB_SUBMIT_SO=$TARGET/libjob_submit_spares.so
if ((ONLY_PLUGINS)); then
    VERSION=$VERSION+slurm$SLURM_VERSION
    [[ ${SPARES_SKIP_BUILD:-0} == 1 ]] || "$ROOT/scripts/build-plugins.sh" --slurm "$RELEASE" --include "$INCLUDE"
    SPANK_SO=${CARGO_TARGET_DIR:-$ROOT/target}/slurm-$RELEASE/spank_spares.so
    JOB_SUBMIT_SO=${CARGO_TARGET_DIR:-$ROOT/target}/slurm-$RELEASE/job_submit_spares.so
    [[ -e $SPANK_SO && -e $JOB_SUBMIT_SO ]] || die "no plugins for Slurm $RELEASE in ${SPANK_SO%/*}"
fi

if [[ ${SPARES_SKIP_BUILD:-0} != 1 ]] && ((!ONLY_PLUGINS)); then
    log "cargo build --release (CLI, daemon, client, C library, plugins)"
    (cd "$ROOT" && cargo build --release -q -p spares-cli -p sparesd -p spares-client \
        -p spares-capi -p spank_spares -p job_submit_spares -p spares-stencil -p spares-freenodes)
fi
if ((!ONLY_PLUGINS)); then
    for f in spares sparesd sparesctl sparesd-node-down spares-free-nodes libspares.so libspares.a \
        libspank_spares.so libjob_submit_spares.so spares-run spares-stencil spares-halo-bench; do
        [[ -e $TARGET/$f ]] || die "$TARGET/$f is not built (run without SPARES_SKIP_BUILD=1)"
    done
fi
# target/release is shared by the builds for every release: package only the right one.
built_for=$("$ROOT/scripts/spares-plugin-check" --plugin-version "$JOB_SUBMIT_SO")
[[ $built_for == "$SLURM_VERSION" ]] ||
    die "$JOB_SUBMIT_SO is built for Slurm $built_for, not $SLURM_VERSION (rebuild: scripts/build-plugins.sh --slurm ${SLURM_VERSION%.*})"

WORK=$(mktemp -d "${TMPDIR:-/tmp}/spares-debs.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$OUT"
rm -f "$OUT"/*.deb

# Stage helpers: install a file (mode) into a package tree; strip ELF files (the release
# profile keeps line tables for backtraces in the build tree, not in packages).
put() { # pkg mode src dest
    local dest=$WORK/$1$4
    install -D -m "$2" "$3" "$dest"
}
put_bin() { # pkg src dest
    put "$1" 0755 "$2" "$3"
    strip --strip-unneeded "$WORK/$1$3"
}
doc() { # pkg: copyright and changelog, as Debian policy wants in every package
    local d=$WORK/$1/usr/share/doc/$1
    install -D -m 0644 "$PKG/debian/copyright" "$d/copyright"
    printf '%s (%s) unstable; urgency=medium\n\n  * Built from the spares workspace.\n\n -- spares maintainers <spares@example.invalid>  %s\n' \
        "$1" "$VERSION" "$(date -R -d @"${SOURCE_DATE_EPOCH:-$(git -C "$ROOT" log -1 --format=%ct 2>/dev/null || date +%s)}")" |
        gzip -9n >"$d/changelog.Debian.gz"
}
man_pages() { # pkg binary: its man pages (spares-manpage: `BIN generate man`), gzipped
    local dir=$WORK/man-$2 m
    "$TARGET/$2" generate man "$dir"
    for m in "$dir"/*.[18]; do
        install -d "$WORK/$1/usr/share/man/man${m##*.}"
        gzip -9n <"$m" >"$WORK/$1/usr/share/man/man${m##*.}/$(basename "$m").gz"
    done
}
completions() { # pkg binary: bash, zsh and fish completions
    "$TARGET/$2" generate completions bash "$WORK/$1/usr/share/bash-completion/completions"
    "$TARGET/$2" generate completions zsh "$WORK/$1/usr/share/zsh/vendor-completions"
    "$TARGET/$2" generate completions fish "$WORK/$1/usr/share/fish/vendor_completions.d"
}
shlibdeps() { # files... -> "libc6 (>= 2.34), ..." (dpkg-shlibdeps wants a debian/control)
    mkdir -p "$WORK/shlibs/debian"
    printf 'Source: spares\n\nPackage: spares\nArchitecture: any\n' >"$WORK/shlibs/debian/control"
    (cd "$WORK/shlibs" && dpkg-shlibdeps -O -e"$@" 2>/dev/null) |
        sed -n 's/^shlibs:Depends=//p'
}
control() { # pkg depends description-line [extra fields...]; description body on stdin
    local pkg=$1 depends=$2 summary=$3
    shift 3
    local size
    size=$(du -sk --exclude=DEBIAN "$WORK/$pkg" | cut -f1)
    mkdir -p "$WORK/$pkg/DEBIAN"
    {
        echo "Package: $pkg"
        echo "Version: $VERSION"
        echo "Architecture: $ARCH"
        echo "Maintainer: spares maintainers <spares@example.invalid>"
        echo "Installed-Size: $size"
        [[ -n $depends ]] && echo "Depends: $depends"
        local f
        for f in "$@"; do echo "$f"; done
        echo "Section: admin"
        echo "Priority: optional"
        echo "Homepage: https://example.invalid/spares"
        echo "Description: $summary"
        sed 's/^$/./; s/^/ /'
    } >"$WORK/$pkg/DEBIAN/control"
}
conffiles() { # pkg: every file under etc/ of the package is a conffile
    local pkg=$1
    if [[ -d $WORK/$pkg/etc ]]; then
        (cd "$WORK/$pkg" && find etc -type f | sort | sed 's|^|/|') >"$WORK/$pkg/DEBIAN/conffiles"
    fi
}
scripts() { # pkg: maintainer scripts from packaging/debian/<pkg>.*
    local pkg=$1 s
    for s in preinst postinst prerm postrm; do
        if [[ -e $PKG/debian/$pkg.$s ]]; then
            sed "s|@SLURM_VERSION@|$SLURM_VERSION|g" "$PKG/debian/$pkg.$s" >"$WORK/$pkg/DEBIAN/$s"
            chmod 0755 "$WORK/$pkg/DEBIAN/$s"
        fi
    done
}
build() { # pkg
    conffiles "$1"
    scripts "$1"
    # md5sums: what `dpkg --verify` and debsums check.
    (cd "$WORK/$1" && find . -path ./DEBIAN -prune -o -type f -printf '%P\0' | sort -z |
        xargs -0r md5sum >DEBIAN/md5sums)
    dpkg-deb --root-owner-group -Zxz --build "$WORK/$1" "$OUT/${1}_${VERSION}_$ARCH.deb" >/dev/null
    log "built $OUT/${1}_${VERSION}_$ARCH.deb"
}

# ------------------------------------------------------------------ slurm-spares-plugins
P=slurm-spares-plugins
put_bin $P "$SPANK_SO" "$PLUGINDIR/spank_spares.so"
put_bin $P "$JOB_SUBMIT_SO" "$PLUGINDIR/job_submit_spares.so"
# The release check the postinst runs (and admins, before restarting slurmctld).
put $P 0755 "$ROOT/scripts/spares-plugin-check" /usr/sbin/spares-plugin-check
install -d "$WORK/$P/usr/lib/spares"
echo "$SLURM_VERSION" >"$WORK/$P/usr/lib/spares/slurm-release"
chmod 0644 "$WORK/$P$PLUGINDIR"/*.so
install -d "$WORK/$P/etc/slurm/plugstack.conf.d"
sed "s|@PLUGINDIR@|$PLUGINDIR|" "$PKG/etc/spares.conf" >"$WORK/$P/etc/slurm/plugstack.conf.d/spares.conf"
# The site policy: the example of configs/, with the topology beside it in /etc/slurm.
sed 's|^topology: .*|topology: spares-topology.yaml|' "$ROOT/configs/policy-spares.yaml" \
    >"$WORK/$P/etc/slurm/spares.yaml"
{
    echo "# /etc/slurm/spares-topology.yaml: the network of this cluster, read through"
    echo "# topology: in /etc/slurm/spares.yaml. This example is the 4x4x2 torus of the"
    echo "# project's test cluster: replace it with yours (docs/admin.md, \"The topology file\")."
    cat "$ROOT/configs/torus-4x4x2.yaml"
} >"$WORK/$P/etc/slurm/spares-topology.yaml"
chmod 0644 "$WORK/$P"/etc/slurm/*.yaml "$WORK/$P/etc/slurm/plugstack.conf.d/spares.conf"
put_bin $P "$TARGET/spares-free-nodes" /usr/lib/spares/spares-free-nodes
put $P 0644 "$PKG/systemd/spares-free-nodes.service" /lib/systemd/system/spares-free-nodes.service
put $P 0644 "$PKG/etc/tmpfiles-spares.conf" /usr/lib/tmpfiles.d/spares.conf
doc $P
plugin_deps=$(shlibdeps "$WORK/$P$PLUGINDIR/spank_spares.so" "$WORK/$P$PLUGINDIR/job_submit_spares.so" \
    "$WORK/$P/usr/lib/spares/spares-free-nodes")
control $P "$SLURM_DEPENDS${plugin_deps:+, $plugin_deps}" \
    "spares plugins for Slurm $SLURM_VERSION (SPANK and job_submit)" \
    "Recommends: sparesd, spares" <<EOF
spank_spares.so adds --spares, --job-shape and --spare-method to sbatch, salloc
and srun and gives every job step its spare map (SLURM_SPARES_MAP,
SLURM_SPARES_HOSTFILE, SLURM_SPARES_ROLE, SLURM_SPARES_RANK);
job_submit_spares.so (JobSubmitPlugins=spares) pads a job to its box and pins
it on free nodes. Built against Slurm $SLURM_VERSION (Debian $installed): a
job_submit plugin loads only into exactly that Slurm version.
EOF
build $P

# --slurm: this package only (the others do not depend on Slurm).
if ((ONLY_PLUGINS)); then
    log "done: slurm-spares-plugins for Slurm $SLURM_VERSION in $OUT (the other packages: build-debs.sh without --slurm)"
    exit 0
fi

# ------------------------------------------------------------------ spares (CLI)
P=spares
put_bin $P "$TARGET/spares" /usr/bin/spares
man_pages $P spares
completions $P spares
doc $P
for f in admin.md user.md runtime.md model-notes.md slurm-plugin-notes.md simulation.md; do
    [[ -e $ROOT/docs/$f ]] && put $P 0644 "$ROOT/docs/$f" /usr/share/doc/spares/$f
done
[[ -d $ROOT/docs/examples ]] && for f in "$ROOT"/docs/examples/*; do
    put $P 0644 "$f" "/usr/share/doc/spares/examples/$(basename "$f")"
done
for f in "$ROOT"/configs/*.yaml; do
    [[ $f == */policy-spares.yaml ]] && continue
    put $P 0644 "$f" "/usr/share/doc/spares/examples/topologies/$(basename "$f")"
done
put $P 0644 "$ROOT/configs/policy-spares.yaml" /usr/share/doc/spares/examples/policy-spares.yaml
put $P 0644 "$ROOT/configs/slurm.conf.spares" /usr/share/doc/spares/examples/slurm.conf.spares
put $P 0644 "$ROOT/configs/simulate-array.sbatch" /usr/share/doc/spares/examples/simulate-array.sbatch
control $P "$(shlibdeps "$WORK/$P/usr/bin/spares")" \
    "spare-node planning and sliding substitution for mesh/torus networks" \
    "Suggests: slurm-spares-plugins, sparesd" <<'EOF'
spares plans jobs with spare nodes on Cartesian (mesh/torus) networks: the box
of a job, the spare shape qD(r,s), which nodes compute and which wait. It
substitutes failed nodes by sliding (0D ... 3D and hybrids) and counts the
message collisions of the resulting maps, and writes SLURM_HOSTFILE and
Open MPI rankfiles.
EOF
build $P

# ------------------------------------------------------------------ sparesd
P=sparesd
put_bin $P "$TARGET/sparesd" /usr/sbin/sparesd
put_bin $P "$TARGET/sparesctl" /usr/bin/sparesctl
put_bin $P "$TARGET/sparesd-node-down" /usr/lib/spares/sparesd-node-down
put $P 0644 "$ROOT/configs/sparesd.service" /lib/systemd/system/sparesd.service
put $P 0644 "$ROOT/configs/sparesd.toml" /etc/spares/sparesd.toml
man_pages $P sparesd
man_pages $P sparesctl
completions $P sparesctl
doc $P
for f in sparesd.md protocol.md; do
    put $P 0644 "$ROOT/docs/$f" /usr/share/doc/sparesd/$f
done
control $P "adduser, $(shlibdeps "$WORK/$P/usr/sbin/sparesd" "$WORK/$P/usr/bin/sparesctl" "$WORK/$P/usr/lib/spares/sparesd-node-down")" \
    "spare-node substitution daemon for Slurm jobs" "Recommends: munge" <<'EOF'
sparesd keeps a registry of jobs with spare nodes and answers "node X of job J
died: where does everything go now?" with the sliding substitution of the
spares model, durable (journal and snapshot) before every acknowledgement.
Includes sparesctl and the strigger program sparesd-node-down.
EOF
build $P

# ------------------------------------------------------------------ spares-examples
P=spares-examples
for b in spares-run spares-stencil spares-halo-bench; do
    put_bin $P "$TARGET/$b" /usr/bin/$b
done
man_pages $P spares-run
doc $P
put $P 0644 "$ROOT/examples/README.md" /usr/share/doc/$P/README.md
control $P "$(shlibdeps "$WORK/$P/usr/bin/spares-run" "$WORK/$P/usr/bin/spares-stencil" "$WORK/$P/usr/bin/spares-halo-bench")" \
    "example job that survives node failures on its spare nodes" "Recommends: sparesd, slurm-spares-plugins" <<'EOF'
spares-run starts a program's ranks on a Slurm job's spare map and, when a node
dies, restarts them on the map sparesd chose from the last checkpoint;
spares-stencil is a 3D heat stencil rank that checkpoints and restarts
bit-identically; spares-halo-bench measures halo exchange on a map.
EOF
build $P

# ------------------------------------------------------------------ libspares0, libspares-dev
P=libspares0
put $P 0644 "$TARGET/libspares.so" "/usr/lib/$MULTIARCH/libspares.so.0"
strip --strip-unneeded "$WORK/$P/usr/lib/$MULTIARCH/libspares.so.0"
soname=$(objdump -p "$WORK/$P/usr/lib/$MULTIARCH/libspares.so.0" | awk '$1 == "SONAME" {print $2}')
[[ $soname == libspares.so.0 ]] || die "libspares.so has soname '$soname', not libspares.so.0 (sparesd/capi/build.rs)"
doc $P
control $P "$(shlibdeps "$WORK/$P/usr/lib/$MULTIARCH/libspares.so.0")" \
    "C client library of sparesd (runtime)" "Section: libs" <<'EOF'
libspares connects MPI runtimes to sparesd: report a failed node, get the
substitution and the job's new map (protocol v1).
EOF
sed -i '/^Section: admin$/d' "$WORK/$P/DEBIAN/control"
echo "libspares 0 libspares0 (>= $UPSTREAM)" >"$WORK/$P/DEBIAN/shlibs"
echo "activate-noawait ldconfig" >"$WORK/$P/DEBIAN/triggers"
build $P

P=libspares-dev
put $P 0644 "$ROOT/sparesd/capi/include/spares.h" /usr/include/spares.h
put $P 0644 "$TARGET/libspares.a" "/usr/lib/$MULTIARCH/libspares.a"
strip --strip-debug "$WORK/$P/usr/lib/$MULTIARCH/libspares.a"
ln -s libspares.so.0 "$WORK/$P/usr/lib/$MULTIARCH/libspares.so"
install -d "$WORK/$P/usr/lib/$MULTIARCH/pkgconfig"
sed "s|@MULTIARCH@|$MULTIARCH|; s|@VERSION@|$UPSTREAM|" "$PKG/etc/spares.pc.in" \
    >"$WORK/$P/usr/lib/$MULTIARCH/pkgconfig/spares.pc"
doc $P
[[ -e $ROOT/docs/runtime.md ]] && put $P 0644 "$ROOT/docs/runtime.md" /usr/share/doc/$P/runtime.md
control $P "libspares0 (= $VERSION), libmunge-dev" \
    "C client library of sparesd (development files)" "Section: libdevel" <<'EOF'
spares.h, libspares.so, libspares.a and spares.pc (pkg-config spares) for
building MPI runtimes and tools against sparesd's C API.
EOF
sed -i '/^Section: admin$/d' "$WORK/$P/DEBIAN/control"
build $P

log "done: $(ls "$OUT"/*.deb | wc -l) packages in $OUT (Slurm $SLURM_VERSION, plugins in $PLUGINDIR)"
