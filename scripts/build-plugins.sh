#!/usr/bin/env bash
# Builds the spares Slurm plugins for one Slurm release, from that release's headers, into
# target/slurm-RELEASE/ (spank_spares.so, job_submit_spares.so and SLURM_RELEASE, the exact
# release they are for, e.g. 24.11.5).
#
#   scripts/build-plugins.sh --slurm 24.11|26.05|22.05 [--include DIR]
#
# The headers: --include DIR (holding slurm/slurm.h), else for 22.05 the host's /usr/include,
# else the release's root filesystem (tests/cluster/rootfs.sh makes or reuses it). The .so files
# are cdylibs of the host's Rust, linked against the host's glibc (2.36): newer C libraries load
# them (symbol versions are backward compatible), so the same files serve every release's box.
# The build shares target/release with the host build: switching releases rebuilds only
# slurm-sys and the plugin crates (a few seconds), and target/release is given back its host
# build afterwards (packaging/build-debs.sh packages it, the host's cluster loads it).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=tests/cluster/releases.sh
. "$ROOT/tests/cluster/releases.sh"

release=22.05 include=
while (($#)); do
    case $1 in
        --slurm) release=$2; shift 2 ;;
        --include) include=$2; shift 2 ;;
        *) echo "usage: $0 --slurm RELEASE [--include DIR]" >&2; exit 2 ;;
    esac
done
release_vars "$release"
if [[ -z $include ]]; then
    if [[ $SUITE == host ]]; then
        include=/usr/include
    else
        include=$("$ROOT/tests/cluster/rootfs.sh" "$RELEASE")/usr/include
    fi
fi
grep -q "SLURM_VERSION_NUMBER" "$include/slurm/slurm_version.h" 2>/dev/null ||
    { echo "build-plugins: no slurm/slurm_version.h under $include" >&2; exit 1; }

target=${CARGO_TARGET_DIR:-$ROOT/target}
out=$target/slurm-$RELEASE
t0=$SECONDS
# One build at a time: target/release is shared, and the copy below must be of our build.
mkdir -p "$target"
exec 8>"$target/.build-plugins.lock"
flock 8
(cd "$ROOT" && SLURM_INCLUDE_DIR=$include cargo build --release -q -p spank_spares -p job_submit_spares)
mkdir -p "$out"
install -m 0755 "$target/release/libspank_spares.so" "$out/spank_spares.so"
install -m 0755 "$target/release/libjob_submit_spares.so" "$out/job_submit_spares.so"

# The release the build is for, as the headers say; it must be the one asked for.
number=$(sed -n 's/^#define SLURM_VERSION_NUMBER \(0x[0-9a-fA-F]*\).*/\1/p' "$include/slurm/slurm_version.h")
full=$(printf '%d.%02d.%d' $((number >> 16)) $(((number >> 8) & 0xff)) $((number & 0xff)))
[[ $full == "$SLURM_DEB_PREFIX"* ]] || { echo "build-plugins: headers in $include are Slurm $full, not $RELEASE" >&2; exit 1; }
got=$("$ROOT/scripts/spares-plugin-check" --plugin-version "$out/job_submit_spares.so")
[[ $got == "$full" ]] || { echo "build-plugins: job_submit_spares.so says plugin_version $got, headers $full" >&2; exit 1; }
echo "$full" >"$out/SLURM_RELEASE"
if [[ $include != /usr/include && -e /usr/include/slurm/slurm_version.h ]]; then
    (cd "$ROOT" && cargo build --release -q -p spank_spares -p job_submit_spares)
fi
echo "build-plugins: Slurm $full plugins in $out ($((SECONDS - t0)) s)" >&2
