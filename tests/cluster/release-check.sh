#!/usr/bin/env bash
# A plugin built for one Slurm release is refused on another before slurmctld ever loads it
# (slurmctld would exit: "fatal: failed to initialize job_submit plugin"). For 24.11 and 26.05,
# in each release's box: scripts/spares-plugin-check refuses the 22.05 build of
# job_submit_spares.so with a message naming both releases and accepts the release's own
# build, and `cluster.sh --slurm R up` offered the 22.05 build stops before slurmctld starts.
# The packages: apt in the release's root filesystem refuses the 22.05 slurm-spares-plugins
# package (its Depends pin Slurm 22.05.8) and accepts the release's own (simulated installs:
# the cached tree is not changed), and the 22.05 package's postinst, run there after a forced
# install, refuses with a message naming both releases. Last, the release's own plugins in a
# cluster: a job modification with a malformed --spares (update_spank_env.c) is refused, the
# user reads why (job_modify's err_msg, since 23.02), and the plugin names the job by its id
# (26.05 moved it into step_id).
#
#   tests/cluster/release-check.sh [RELEASE...]   (default 24.11 26.05); last line
#                                                 "N passed, M failed"
set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
# shellcheck source=tests/cluster/lib.sh
. "$HERE/lib.sh"
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
CHECK=$ROOT/scripts/spares-plugin-check
releases=("$@")
((${#releases[@]})) || releases=(24.11 26.05)

"$ROOT/scripts/build-plugins.sh" --slurm 22.05 || { fail "build the 22.05 plugins"; finish; exit 1; }
old=$TARGET/slurm-22.05/job_submit_spares.so
SPARES_SKIP_BUILD=1 "$ROOT/packaging/build-debs.sh" --slurm 22.05 >/dev/null 2>&1 ||
    { fail "build-debs.sh --slurm 22.05"; finish; exit 1; }
old_deb=$(ls "$TARGET"/debian/slurm-22.05/slurm-spares-plugins_*+slurm22.05.*_*.deb)
dirs=()
cleanup() {
    local d
    for d in "${dirs[@]}"; do "$HERE/box.sh" "${d##*-}" "$d" stop >/dev/null 2>&1; done
}
trap cleanup EXIT

for r in "${releases[@]}"; do
    release_vars "$r" || exit 2
    dir=/tmp/spares-release-check-$RELEASE
    dirs+=("$dir")
    mkdir -p "$dir"
    [[ ${SPARES_SKIP_BUILD:-0} == 1 ]] || "$ROOT/scripts/build-plugins.sh" --slurm "$RELEASE" ||
        { fail "[$RELEASE] build the plugins"; continue; }
    "$HERE/box.sh" "$RELEASE" "$dir" start || { fail "[$RELEASE] box start"; continue; }

    out=$("$HERE/box.sh" "$RELEASE" "$dir" exec "$CHECK" --plugin "$old" 2>&1)
    rc=$?
    if ((rc != 0)) && [[ $out == *"is built for Slurm 22.05.8, but this Slurm is $SLURM_DEB_PREFIX"* ]]; then
        pass "[$RELEASE] spares-plugin-check refuses the 22.05 plugin: ${out#spares-plugin-check: }"
    else
        fail "[$RELEASE] spares-plugin-check refuses the 22.05 plugin" "rc=$rc: $out"
    fi
    out=$("$HERE/box.sh" "$RELEASE" "$dir" exec "$CHECK" --plugin "$TARGET/slurm-$RELEASE/job_submit_spares.so" 2>&1)
    if [[ $? == 0 ]]; then
        pass "[$RELEASE] spares-plugin-check accepts the $RELEASE build"
    else
        fail "[$RELEASE] spares-plugin-check accepts the $RELEASE build" "$out"
    fi

    # The packages, with the release's own apt.
    out=$("$HERE/box.sh" "$RELEASE" "$dir" exec apt-get install -s "$old_deb" 2>&1)
    if [[ $out == *"Depends: slurm-wlm-basic-plugins (< 22.05.9~) but $SLURM_DEB_PREFIX"* && $out != *"Inst slurm-spares-plugins"* ]]; then
        pass "[$RELEASE] apt refuses the 22.05 package: $(grep -m1 'Depends: slurm-wlm' <<<"$out" | sed 's/^ *//')"
    else
        fail "[$RELEASE] apt refuses the 22.05 package" "$out"
    fi
    if SPARES_SKIP_BUILD=1 "$ROOT/packaging/build-debs.sh" --slurm "$RELEASE" >"$dir/build-debs.log" 2>&1; then
        deb=$(ls "$TARGET/debian/slurm-$RELEASE"/slurm-spares-plugins_*_*.deb)
        out=$("$HERE/box.sh" "$RELEASE" "$dir" exec apt-get install -s "$deb" 2>&1)
        if [[ $out == *"Inst slurm-spares-plugins"* ]]; then
            pass "[$RELEASE] apt accepts $(basename "$deb")"
        else
            fail "[$RELEASE] apt accepts the $RELEASE package" "$out"
        fi
    else
        fail "[$RELEASE] build-debs.sh --slurm $RELEASE" "$(tail -5 "$dir/build-debs.log")"
    fi
    rm -rf "$dir/control"
    dpkg-deb -e "$old_deb" "$dir/control"
    out=$("$HERE/box.sh" "$RELEASE" "$dir" exec sh "$dir/control/postinst" configure 2>&1)
    rc=$?
    if ((rc != 0)) && [[ $out == *"built for Slurm 22.05.8, but Slurm $SLURM_DEB_PREFIX"* ]]; then
        pass "[$RELEASE] the 22.05 package's postinst refuses: $(head -1 <<<"$out")"
    else
        fail "[$RELEASE] the 22.05 package's postinst refuses" "rc=$rc: $out"
    fi
    "$HERE/box.sh" "$RELEASE" "$dir" stop >/dev/null

    out=$(SPARES_CLUSTER_DIR=$dir SPARES_PLUGIN_BUILD_DIR=$TARGET/slurm-22.05 \
        "$HERE/cluster.sh" --slurm "$RELEASE" up 2>&1)
    rc=$?
    if ((rc != 0)) && [[ $out == *"not starting slurmctld"* && $out == *"built for Slurm 22.05.8"* ]] &&
        [[ ! -e $dir/log/slurmctld.log ]]; then
        pass "[$RELEASE] cluster.sh up with the 22.05 plugin stops before slurmctld starts"
    else
        fail "[$RELEASE] cluster.sh up with the 22.05 plugin stops before slurmctld starts" \
            "rc=$rc: $(tail -5 <<<"$out"); slurmctld.log: $(ls "$dir/log" 2>&1)"
    fi
    SPARES_CLUSTER_DIR=$dir "$HERE/cluster.sh" --slurm "$RELEASE" down >/dev/null 2>&1

    # The release's own plugins: job_modify's message reaches the user.
    run() { SPARES_CLUSTER_DIR=$dir "$HERE/cluster.sh" --slurm "$RELEASE" "$@"; }
    if run up >/dev/null 2>&1 && run exec cc -o "$dir/update_spank_env" "$HERE/update_spank_env.c" -lslurm; then
        job=$(run exec sbatch --parsable -H --wrap true 2>&1)
        out=$(run exec "$dir/update_spank_env" "$job" _SLURM_SPANK_OPTION_spares_spares=bogus 2>&1)
        rc=$?
        if ((rc != 0)) && [[ $out == *"spares: invalid --spares=bogus: expected qD(r,s)"* ]]; then
            pass "[$RELEASE] a modification with --spares=bogus is refused and the user reads why"
        else
            fail "[$RELEASE] a modification with --spares=bogus is refused with job_modify's message" "rc=$rc: $out"
        fi
        if grep -q "spares: modify job $job: spares=bogus" "$dir/log/slurmctld.log"; then
            pass "[$RELEASE] job_modify names the job by its id ($job)"
        else
            fail "[$RELEASE] job_modify names the job by its id ($job)" "$(grep 'spares: modify' "$dir/log/slurmctld.log")"
        fi
    else
        fail "[$RELEASE] cluster with the $RELEASE plugins up, update_spank_env built" "see $dir/log"
    fi
    run down >/dev/null 2>&1
done
finish
