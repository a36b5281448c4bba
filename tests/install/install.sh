#!/usr/bin/env bash
# The install test: builds the Debian packages (packaging/build-debs.sh), installs them on this
# machine with apt-get, checks what a site gets (man pages, --help, completions, the systemd
# unit, conffiles, the C library through pkg-config), runs a private Slurm cluster on the
# INSTALLED plugins and daemon (not the build tree) with a job with spares, a failure reported
# through the installed C library and sparesctl, upgrades to a second build (edited conffiles
# kept), then removes (only conffiles and the daemon's state stay) and purges (nothing stays).
#
#   tests/install/install.sh      root; exit 0 when every check passed; the last line reads
#                                 "N passed, M failed"
#   tests/install/install.sh --slurm RELEASE
#                                 the same test in RELEASE's own Debian (24.11: trixie, 26.05:
#                                 sid): the packages with that release's slurm-spares-plugins
#                                 (packaging/build-debs.sh --slurm), a disposable copy of its
#                                 root filesystem (tests/cluster/rootfs.sh) where the release's
#                                 apt fetches what they depend on, then every check below in a
#                                 box on that copy (tests/cluster/box.sh); the copy is deleted
#
# Environment:
#   SPARES_CLUSTER_DIR, SPARES_CTLD_PORT, SPARES_NODE_PORT   the cluster (defaults
#       /tmp/spares-pkg-cluster, 18817, 19901: apart from tests/cluster's default cluster, and below
#       the kernel's ephemeral ports, which a busy machine hands out to outgoing connections)
#   SPARES_INSTALL_SCENARIO=SCRIPT  run SCRIPT against the installed cluster (SLURM_CONF,
#       SPARES_SOCKET and SPARES_CLUSTER_DIR exported); its exit status is one check
#   SPARES_DEBS_SKIP_BUILD=1        package target/release as it is (no cargo build)
#   SPARES_INSTALL_DEBS=DIR         install DIR/debs1/*.deb and upgrade to DIR/debs2/*.deb
#       instead of building (--slurm sets it for the run in the box)
#
# The packages are purged again on exit, also on failure or Ctrl-C. The test refuses to run
# if one of them is installed already (it would remove a real installation).

set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
CLUSTER=$ROOT/tests/cluster/cluster.sh
PACKAGES=(spares slurm-spares-plugins sparesd libspares0 libspares-dev spares-examples)
# shellcheck source=tests/cluster/releases.sh
. "$ROOT/tests/cluster/releases.sh"
if [[ ${1:-} == --slurm ]]; then
    SPARES_SLURM=${2:?--slurm needs a release}
fi
release_vars "${SPARES_SLURM:-22.05}" || exit 2
export SPARES_SLURM=$RELEASE

# ------------------------------------------------------------------ another release: in a box
if [[ $SUITE != host && ${SPARES_INSIDE_BOX:-0} != 1 ]]; then
    [[ $(id -u) == 0 ]] || { echo "install test: run as root (chroot, apt, a box)" >&2; exit 1; }
    export SPARES_CLUSTER_DIR=${SPARES_CLUSTER_DIR:-/tmp/spares-pkg-cluster-$SPARES_RELEASE_TAG}
    DIR=$SPARES_CLUSTER_DIR
    TREE=/var/tmp/spares-install-root-$SPARES_RELEASE_TAG
    BOX=$ROOT/tests/cluster/box.sh
    say() { printf 'install test (Slurm %s): %s\n' "$RELEASE" "$*"; }
    umountq() { mountpoint -q "$1" && umount -l "$1" || true; }
    release_cleanup() {
        SPARES_BOX_TREE=$TREE "$BOX" "$RELEASE" "$DIR" stop >/dev/null 2>&1 || true
        umountq "$TREE/dev"
        umountq "$TREE/proc"
        rm -rf "$TREE"
    }
    trap release_cleanup EXIT
    trap 'exit 130' INT TERM
    rm -rf "$DIR" && mkdir -p "$DIR/debs"
    say "the packages, with slurm-spares-plugins for Slurm $RELEASE"
    build_env=()
    [[ ${SPARES_DEBS_SKIP_BUILD:-0} == 1 ]] && build_env=(SPARES_SKIP_BUILD=1)
    for rev in 1 2; do
        out=$DIR/debs/debs$rev
        # Revision 2 packages the same build (the upgrade step).
        ((rev == 2)) && build_env=(SPARES_SKIP_BUILD=1)
        env "${build_env[@]}" SPARES_DEB_REVISION=$rev "$ROOT/packaging/build-debs.sh" "$out.host" >/dev/null &&
            env "${build_env[@]}" SPARES_DEB_REVISION=$rev "$ROOT/packaging/build-debs.sh" --slurm "$RELEASE" "$out" >/dev/null ||
            { echo "FAIL packaging/build-debs.sh (--slurm $RELEASE)"; echo "0 passed, 1 failed"; exit 1; }
        # Every package of the host build but its plugins (built for the host's Slurm).
        find "$out.host" -name '*.deb' ! -name 'slurm-spares-plugins_*' -exec mv -t "$out" {} +
        rm -rf "$out.host"
    done
    say "a disposable copy of the Debian $SUITE root filesystem"
    tree=$("$ROOT/tests/cluster/rootfs.sh" "$RELEASE") || exit 1
    rm -rf "$TREE"
    cp -a "$tree" "$TREE"
    # The box has no route to a mirror: what the packages depend on (and man, pkg-config for
    # the checks) comes from the release's archive now, in a chroot; the packages themselves
    # are installed and purged once here, so that in the box apt finds every dependency.
    say "apt-get install of the packages in $TREE (the release's archive for their dependencies)"
    mkdir -p "$TREE/var/tmp/spares-debs"
    cp "$DIR"/debs/debs1/*.deb "$TREE/var/tmp/spares-debs/"
    cp /etc/resolv.conf "$TREE/etc/resolv.conf" 2>/dev/null || true
    mount -t proc proc "$TREE/proc" && mount --bind /dev "$TREE/dev"
    if ! chroot "$TREE" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin DEBIAN_FRONTEND=noninteractive \
        sh -c "apt-get update -qq && apt-get install -y -qq man-db pkgconf /var/tmp/spares-debs/*.deb &&
               dpkg --purge ${PACKAGES[*]} && rm -rf /var/tmp/spares-debs" >"$DIR/apt.log" 2>&1; then
        echo "FAIL apt-get install of the packages in Debian $SUITE"
        tail -n 20 "$DIR/apt.log" | sed 's/^/     | /'
        echo "0 passed, 1 failed"
        exit 1
    fi
    umountq "$TREE/dev"
    umountq "$TREE/proc"
    say "the install test in a box of that tree"
    SPARES_BOX_TREE=$TREE "$BOX" "$RELEASE" "$DIR" start || exit 1
    rc=0
    SLURM_CONF= "$BOX" "$RELEASE" "$DIR" exec env SPARES_INSIDE_BOX=1 SPARES_SLURM="$RELEASE" \
        SPARES_CLUSTER_DIR="$DIR" SPARES_INSTALL_DEBS="$DIR/debs" SPARES_SKIP_BUILD=1 \
        bash "$ROOT/tests/install/install.sh" || rc=$?
    exit "$rc"
fi

export SPARES_CLUSTER_DIR=${SPARES_CLUSTER_DIR:-/tmp/spares-pkg-cluster}
export SPARES_CTLD_PORT=${SPARES_CTLD_PORT:-18817}
export SPARES_NODE_PORT=${SPARES_NODE_PORT:-19901}
DIR=$SPARES_CLUSTER_DIR
MULTIARCH=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || gcc -print-multiarch)

passed=0
failed=0
pass() { passed=$((passed + 1)); printf 'PASS %s\n' "$1"; }
fail() {
    failed=$((failed + 1))
    printf 'FAIL %s\n' "$1"
    [[ -n ${2:-} ]] && printf '%s\n' "$2" | head -n 30 | sed 's/^/     | /'
}
check() { # description command... : PASS when the command succeeds, else FAIL with its output
    local what=$1 out
    shift
    if out=$("$@" 2>&1); then pass "$what"; else fail "$what" "$out"; fi
}
finish() {
    echo "$passed passed, $failed failed"
    ((failed == 0))
}

[[ $(id -u) == 0 ]] || { echo "install test: run as root (it installs packages)" >&2; exit 1; }
for p in "${PACKAGES[@]}"; do
    if dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'installed\|config-files'; then
        echo "install test: package $p is installed on this machine; the test would purge it." >&2
        echo "install test: remove it first (apt-get purge ${PACKAGES[*]}) or use a test machine" >&2
        exit 1
    fi
done

WORK=$(mktemp -d /tmp/spares-install.XXXXXX)
chmod 0755 "$WORK" # the sparesd user reads the config copy there
SPARESD_PID=
installed=0
cleanup() {
    "$CLUSTER" down >/dev/null 2>&1 || true
    if [[ -n $SPARESD_PID ]] && [[ $(cat /proc/"$SPARESD_PID"/comm 2>/dev/null) == sparesd ]]; then
        kill "$SPARESD_PID" 2>/dev/null || true
    fi
    if ((installed)); then
        dpkg --purge "${PACKAGES[@]}" >/dev/null 2>&1 || true
    fi
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
export DEBIAN_FRONTEND=noninteractive

# ------------------------------------------------------------------ build
echo "== build the packages"
build_env=()
[[ ${SPARES_DEBS_SKIP_BUILD:-0} == 1 ]] && build_env=(SPARES_SKIP_BUILD=1)
if [[ -n ${SPARES_INSTALL_DEBS:-} ]]; then
    cp -r "$SPARES_INSTALL_DEBS/debs1" "$SPARES_INSTALL_DEBS/debs2" "$WORK/" &&
        pass "the packages built on the host for Slurm $RELEASE: $(ls "$WORK"/debs1/*.deb | wc -l) (and revision 2)"
elif env "${build_env[@]}" "$ROOT/packaging/build-debs.sh" "$WORK/debs1" &&
    SPARES_SKIP_BUILD=1 SPARES_DEB_REVISION=2 "$ROOT/packaging/build-debs.sh" "$WORK/debs2"; then
    pass "packaging/build-debs.sh built $(ls "$WORK"/debs1/*.deb | wc -l) packages (and revision 2)"
else
    fail "packaging/build-debs.sh"
    finish
    exit 1
fi
deb() { ls "$WORK/$1/${2}_"*.deb; }

plugin_depends=$(dpkg-deb -f "$(deb debs1 slurm-spares-plugins)" Depends)
slurm_upstream=$(dpkg-query -W -f='${Version}' slurm-wlm-basic-plugins)
slurm_upstream=${slurm_upstream%%-*}
if [[ $plugin_depends == *"slurm-wlm-basic-plugins (>= $slurm_upstream)"* &&
    $plugin_depends == *"slurm-wlm-basic-plugins (<< "* ]]; then
    pass "slurm-spares-plugins depends on Slurm $slurm_upstream exactly ($plugin_depends)"
else
    fail "slurm-spares-plugins depends on Slurm $slurm_upstream" "$plugin_depends"
fi
check "every package has a Description and a copyright file" \
    bash -c "for d in '$WORK'/debs1/*.deb; do dpkg-deb -f \"\$d\" Description >/dev/null &&
        dpkg-deb -c \"\$d\" | grep -q '/usr/share/doc/.*/copyright' || { echo \"\$d\"; exit 1; }; done"

# ------------------------------------------------------------------ install
echo "== install"
installed=1
if out=$(apt-get install -y -q "$WORK"/debs1/*.deb 2>&1); then
    pass "apt-get install ./*.deb"
else
    fail "apt-get install ./*.deb" "$out"
    finish
    exit 1
fi
for p in "${PACKAGES[@]}"; do
    dpkg -L "$p" >"$WORK/files-$p"
    dpkg-query -W -f='${Conffiles}\n' "$p" | awk 'NF {print $1}' >"$WORK/conffiles-$p"
done
check "every package is installed" bash -c \
    "for p in ${PACKAGES[*]}; do dpkg-query -W -f='\${Status}\n' \$p | grep -qx 'install ok installed' || exit 1; done"
check "dpkg --verify finds every file as packaged" dpkg --verify "${PACKAGES[@]}"

# The CLI, its man pages and completions.
check "spares --help" bash -c 'spares --help | grep -q "^  plan"'
check "spares --version" bash -c 'spares --version | grep -q "^spares "'
check "man -w spares" bash -c 'man -w spares | grep -q "^/usr/share/man/man1/spares.1.gz$"'
check "man spares renders" bash -c 'MANPAGER=cat MANWIDTH=80 man spares 2>/dev/null | grep -q "spares-plan(1)"'
check "man spares-plan, sparesctl(1), sparesd(8)" bash -c 'man -w spares-plan && man -w sparesctl && man -w 8 sparesd'
check "bash completion loads and completes subcommands" bash -c '
    source /usr/share/bash-completion/completions/spares && complete -p spares >/dev/null &&
    COMP_WORDS=(spares pl) COMP_CWORD=1 COMP_LINE="spares pl" COMP_POINT=9 &&
    fn=$(complete -p spares | sed -n "s/.*-F \([^ ]*\) .*/\1/p") && "$fn" spares pl spares &&
    [[ " ${COMPREPLY[*]} " == *" plan "* ]] || { echo "COMPREPLY=${COMPREPLY[*]}"; exit 1; }'
check "zsh and fish completions installed" test -s /usr/share/zsh/vendor-completions/_spares \
    -a -s /usr/share/fish/vendor_completions.d/spares.fish
if command -v zsh >/dev/null; then
    check "zsh completion parses" zsh -n /usr/share/zsh/vendor-completions/_spares
fi
check "the guides are installed" test -s /usr/share/doc/spares/admin.md -a -s /usr/share/doc/spares/user.md \
    -a -s /usr/share/doc/libspares-dev/runtime.md -a -s /usr/share/doc/spares/simulation.md
check "man pages of spares, sparesctl, sparesd and spares-run have EXAMPLES and EXIT STATUS" bash -c '
    for p in spares spares-plan sparesctl sparesctl-map "8 sparesd" spares-run; do
        text=$(MANPAGER=cat MANWIDTH=100 man $p 2>/dev/null)
        grep -q "^EXAMPLES" <<<"$text" && grep -q "^EXIT STATUS" <<<"$text" || { echo "man $p"; exit 1; }
    done'
check "man sparesd names installed paths, not the source tree" bash -c \
    '! MANPAGER=cat man 8 sparesd 2>/dev/null | grep -E "(^|[^/])(configs|docs)/"'
check "sparesctl completions (bash, zsh, fish)" bash -c '
    source /usr/share/bash-completion/completions/sparesctl && complete -p sparesctl >/dev/null &&
    test -s /usr/share/zsh/vendor-completions/_sparesctl -a -s /usr/share/fish/vendor_completions.d/sparesctl.fish'
# What docs/simulation.md uses: the job array example, with its merge step a real job.
check "simulate-array.sbatch is installed and submits its merge step" bash -c \
    'grep -q -- "--dependency=\"afterok:" /usr/share/doc/spares/examples/simulate-array.sbatch &&
     bash -n /usr/share/doc/spares/examples/simulate-array.sbatch'
# The example launcher and stencil (spares-examples), as examples/README.md uses them.
check "spares-examples: spares-run, spares-stencil, spares-halo-bench and their README" bash -c \
    'spares-run --help | grep -q -- "--detect-timeout" && spares-stencil --help >/dev/null &&
     spares-halo-bench --help >/dev/null && test -s /usr/share/doc/spares-examples/README.md'
check "docs/simulation.md and examples/README.md name only what the packages install" bash -c '
    for f in /usr/share/doc/spares/simulation.md; do
        grep -o "/usr/share/doc/[A-Za-z0-9_./-]*" "$f" | sort -u | while read -r path; do
            test -e "$path" || { echo "$f names $path"; exit 1; }
        done || exit 1
    done'


# Plugins, configuration, daemon.
PLUGINDIR=$(dirname "$(grep '/spank_spares.so$' "$WORK/files-slurm-spares-plugins")")
check "plugins in Slurm's plugin directory ($PLUGINDIR)" \
    test -e "$PLUGINDIR/select_linear.so" -a -e "$PLUGINDIR/spank_spares.so" -a -e "$PLUGINDIR/job_submit_spares.so"
want_conffiles="/etc/slurm/plugstack.conf.d/spares.conf /etc/slurm/spares-topology.yaml /etc/slurm/spares.yaml /etc/spares/sparesd.toml"
got_conffiles=$(sort "$WORK"/conffiles-* | xargs)
if [[ $got_conffiles == "$want_conffiles" ]]; then
    pass "conffiles: $got_conffiles"
else
    fail "conffiles" "want: $want_conffiles"$'\n'"got:  $got_conffiles"
fi
check "plugstack.conf.d/spares.conf loads the installed plugin" \
    grep -qx "required $PLUGINDIR/spank_spares.so policy=/etc/slurm/spares.yaml" /etc/slurm/plugstack.conf.d/spares.conf
check "spares-free-nodes installed and runs (the free-node service)" \
    bash -c '/usr/lib/spares/spares-free-nodes --help | grep -q -- --interval'
check "system user sparesd, /var/lib/sparesd 0700 and /run/sparesd owned by it" bash -c \
    'getent passwd sparesd >/dev/null && [[ $(stat -c "%U %a" /var/lib/sparesd) == "sparesd 700" ]] &&
     [[ $(stat -c %U /run/sparesd) == sparesd ]]'
if command -v systemd-analyze >/dev/null; then
    # Only the unit's own lines count: in a container without systemd as PID 1 the verifier
    # also complains about units it cannot reach.
    out=$(systemd-analyze verify /lib/systemd/system/sparesd.service /lib/systemd/system/spares-free-nodes.service 2>&1 |
        grep -E 'sparesd\.service|spares-free-nodes\.service' | grep -v 'Command .* is not executable')
    if [[ -z $out ]]; then pass "systemd-analyze verify sparesd.service spares-free-nodes.service"; else fail "systemd-analyze verify" "$out"; fi
fi
check "the unit runs the installed daemon as user sparesd" bash -c \
    'grep -qx "ExecStart=/usr/sbin/sparesd --config /etc/spares/sparesd.toml" /lib/systemd/system/sparesd.service &&
     grep -qx "User=sparesd" /lib/systemd/system/sparesd.service'
check "sparesd --check accepts the installed configuration (as user sparesd)" \
    setpriv --reuid=sparesd --regid=sparesd --init-groups /usr/sbin/sparesd --config /etc/spares/sparesd.toml --check

# The C library: the example of docs/runtime.md against the installed header and library.
check "docs/runtime.md shows docs/examples/runtime_example.c as it is" bash -c \
    "diff <(awk '/^\`\`\`c\$/{f=1; next} /^\`\`\`/{f=0} f' '$ROOT/docs/runtime.md') \
          <(sed -n '/^#include <stdio.h>/,\$p' '$ROOT/docs/examples/runtime_example.c')"
check "pkg-config spares" bash -c '[[ $(pkg-config --cflags --libs spares) == *-lspares* ]]'
check "runtime_example.c compiles against the installed spares.h and libspares.so" \
    cc -std=c99 -Wall -Wextra -Werror -o "$WORK/runtime_example" "$ROOT/docs/examples/runtime_example.c" \
    $(pkg-config --cflags --libs spares)
check "runtime_example uses /usr/lib/$MULTIARCH/libspares.so.0" bash -c \
    "ldd '$WORK/runtime_example' | grep -q 'libspares.so.0 => \\(/usr\\)\\?/lib/$MULTIARCH/libspares.so.0'"
check "runtime_example links statically with pkg-config --static" \
    cc -std=c99 -o "$WORK/runtime_example_static" "$ROOT/docs/examples/runtime_example.c" \
    $(pkg-config --cflags spares) -Wl,-Bstatic -lspares -Wl,-Bdynamic \
    $(pkg-config --static --libs-only-other --libs-only-l spares | sed 's/-lspares//')

# ------------------------------------------------------------------ the installed cluster
echo "== a Slurm cluster on the installed plugins and daemon"
# This part starts the installed daemon itself (as its user, with the installed configuration).
if SPARES_START_SPARESD=0 SPARES_PLUGIN_DIR=$PLUGINDIR \
    "$CLUSTER" up >"$WORK/up.log" 2>&1; then
    pass "cluster up on $PLUGINDIR (ports $SPARES_CTLD_PORT, $SPARES_NODE_PORT...)"
else
    fail "cluster up" "$(tail -n 20 "$WORK/up.log")"
    finish
    exit 1
fi
export SLURM_CONF=$DIR/etc/slurm.conf
check "slurm.conf and plugstack.conf name no build tree" bash -c \
    "! grep -q '$ROOT\\|target/release\\|$DIR/plugins' '$SLURM_CONF' '$DIR/etc/plugstack.conf' &&
     grep -qx 'required $PLUGINDIR/spank_spares.so policy=$DIR/etc/spares.yaml' '$DIR/etc/plugstack.conf'"

# The installed daemon, with the installed configuration, as its user; socket and state in the
# cluster's directory (where the cluster's policy looks for it).
export SPARES_SOCKET=$DIR/run/sparesd.sock
install -d -o sparesd -g sparesd -m 0700 "$DIR/sparesd-state"
chown sparesd "$DIR/run"
setpriv --reuid=sparesd --regid=sparesd --init-groups /usr/sbin/sparesd --config /etc/spares/sparesd.toml \
    --socket "$SPARES_SOCKET" --state-dir "$DIR/sparesd-state" --slurm-user root >"$DIR/log/sparesd.log" 2>&1 &
SPARESD_PID=$!
for _ in $(seq 50); do [[ -S $SPARES_SOCKET ]] && break; sleep 0.1; done
check "installed sparesd answers sparesctl health" sparesctl health

check "sbatch --help lists --spares (installed SPANK plugin)" bash -c 'sbatch --help | grep -q -- --spares='
out=$(sbatch --spares=bogus --job-shape=3x3x2 --wrap true 2>&1)
if [[ $out == *"spares"* && $out != *"Submitted"* ]]; then pass "a bad --spares is refused by the installed plugin"; else fail "bad --spares refused" "$out"; fi

job=$(cd "$WORK" && sbatch --parsable --no-kill --spares='3D(2,1)' --job-shape=3x3x2 -o "$WORK/job.out" \
    --wrap 'env | grep ^SLURM_SPARES_ | sort; sleep 60' 2>&1)
job=$(tail -n1 <<<"$job") # sbatch's "spares: ... the job gets ..." line comes first
if [[ $job =~ ^[0-9]+$ ]]; then pass "sbatch --spares=3D(2,1) --job-shape=3x3x2: job $job"; else fail "sbatch" "$job"; fi
for _ in $(seq 150); do grep -q SLURM_SPARES_ROLE "$WORK/job.out" 2>/dev/null && break; sleep 0.2; done
check "job $job: padded to the 4x4x2 box (32 nodes)" bash -c "scontrol show job $job | grep -q 'NumNodes=32'"
check "job $job sees SLURM_SPARES_MAP, _HOSTFILE, _ROLE=compute, _RANK=0" bash -c \
    "grep -q '^SLURM_SPARES_MAP=' '$WORK/job.out' && grep -q '^SLURM_SPARES_HOSTFILE=' '$WORK/job.out' &&
     grep -qx 'SLURM_SPARES_ROLE=compute' '$WORK/job.out' && grep -qx 'SLURM_SPARES_RANK=0' '$WORK/job.out'"
for _ in $(seq 50); do sparesctl list 2>/dev/null | grep -qw "$job" && break; sleep 0.2; done
check "the installed plugin registered job $job with the installed sparesd" bash -c "sparesctl list | grep -qw '$job'"
node=$(sed -n 2p "$(grep '^SLURM_SPARES_HOSTFILE=' "$WORK/job.out" | cut -d= -f2)" 2>/dev/null)
out=$("$WORK/runtime_example" "$job" "${node:-node02}" 2>&1)
if grep -q '^REPLY .*"outcome":"substituted"' <<<"$out"; then
    pass "runtime_example (installed libspares) reports ${node:-node02} of job $job: substituted"
else
    fail "runtime_example reports a failure" "$out"
fi
check "sparesctl show $job: one failure in the history" bash -c \
    "sparesctl --json show $job | grep -q '\"step\": 1' && ! sparesctl --json show $job | grep -q '\"step\": 2'"

if [[ -n ${SPARES_INSTALL_SCENARIO:-} ]]; then
    scancel "$job" 2>/dev/null
    if out=$("$SPARES_INSTALL_SCENARIO" 2>&1); then pass "scenario $SPARES_INSTALL_SCENARIO"; else fail "scenario $SPARES_INSTALL_SCENARIO" "$(tail -n 30 <<<"$out")"; fi
fi
scancel "$job" 2>/dev/null
for _ in $(seq 100); do sparesctl list 2>/dev/null | grep -qw "$job" || break; sleep 0.2; done
check "the epilog released job $job from sparesd" bash -c "! sparesctl list | grep -qw '$job'"
"$CLUSTER" down >/dev/null 2>&1
kill "$SPARESD_PID" 2>/dev/null
wait "$SPARESD_PID" 2>/dev/null
SPARESD_PID=
unset SLURM_CONF

# ------------------------------------------------------------------ end to end, installed
# The end-to-end scenario (tests/cluster/e2e.sh: a stencil job loses three nodes and finishes
# on its spares) on a cluster that loads the installed plugins and runs the installed sparesd,
# sparesctl and strigger program. Only the example application comes from the build tree.
if [[ ${SPARES_INSTALL_SKIP_E2E:-0} != 1 && -x $ROOT/tests/cluster/e2e.sh ]]; then
    echo "== the end-to-end scenario on the installed files"
    if out=$(SPARES_PLUGIN_DIR=$PLUGINDIR \
        "$ROOT/tests/cluster/e2e.sh" 2>&1); then
        pass "end to end on the installed files: $(grep -E '^[0-9]+ passed' <<<"$out" | tail -n 1)"
    else
        fail "end to end on the installed files" "$(grep -E '^(FAIL|     \|)' <<<"$out" | head -40; tail -n 3 <<<"$out")"
    fi
    check "that cluster ran the installed sparesd and loaded the installed SPANK plugin" bash -c \
        "cmp -s '$DIR/bin/sparesd' /usr/sbin/sparesd &&
         grep -q '^required $PLUGINDIR/spank_spares.so' '$DIR/etc/plugstack.conf'"
fi

# ------------------------------------------------------------------ upgrade
echo "== upgrade with edited configuration"
marker="# edited by the site (install test)"
for f in /etc/spares/sparesd.toml /etc/slurm/spares.yaml; do echo "$marker" >>"$f"; done
if out=$(apt-get install -y -q -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold \
    "$WORK"/debs2/*.deb 2>&1); then
    pass "apt-get install revision 2 (upgrade)"
else
    fail "upgrade" "$out"
fi
check "upgraded to $(dpkg-deb -f "$(deb debs2 sparesd)" Version)" bash -c \
    "[[ \$(dpkg-query -W -f='\${Version}' sparesd) == \$(dpkg-deb -f '$(deb debs2 sparesd)' Version) ]]"
check "the upgrade kept the edited conffiles" bash -c \
    "grep -qx '$marker' /etc/spares/sparesd.toml && grep -qx '$marker' /etc/slurm/spares.yaml && ! ls /etc/spares/*.dpkg-* /etc/slurm/*.dpkg-* 2>/dev/null"
check "the upgrade kept the sparesd user and state directory" bash -c \
    'getent passwd sparesd >/dev/null && [[ $(stat -c %U /var/lib/sparesd) == sparesd ]]'

# ------------------------------------------------------------------ remove, purge
echo "== remove, then purge"
if out=$(apt-get remove -y -q "${PACKAGES[@]}" 2>&1); then pass "apt-get remove"; else fail "apt-get remove" "$out"; fi
check "after remove every package is in state config-files or gone" bash -c \
    "for p in ${PACKAGES[*]}; do s=\$(dpkg-query -W -f='\${Status}' \$p 2>/dev/null); [[ -z \$s || \$s == 'deinstall ok config-files' || \$s == 'unknown ok not-installed' ]] || { echo \"\$p: \$s\"; exit 1; }; done"
left=()
for p in "${PACKAGES[@]}"; do
    while read -r f; do
        [[ -d $f ]] && continue # directories (/usr/bin, /etc/slurm, /lib -> usr/lib) stay
        grep -qxF "$f" "$WORK/conffiles-$p" && continue
        [[ -e $f || -L $f ]] && left+=("$f")
    done <"$WORK/files-$p"
done
if ((${#left[@]} == 0)); then pass "after remove no packaged file is left but conffiles"; else fail "files left after remove" "${left[*]}"; fi
check "after remove the conffiles stay, edits included" bash -c \
    "cat $WORK/conffiles-* | xargs ls >/dev/null && grep -qx '$marker' /etc/spares/sparesd.toml"

# dpkg, not apt-get: packages without conffiles are gone already and apt no longer knows them.
if out=$(dpkg --purge "${PACKAGES[@]}" 2>&1); then pass "dpkg --purge"; else fail "dpkg --purge" "$out"; fi
check "after purge no package is known to dpkg" bash -c \
    "for p in ${PACKAGES[*]}; do s=\$(dpkg-query -W -f='\${Status}' \$p 2>/dev/null); [[ -z \$s || \$s == 'unknown ok not-installed' ]] || { echo \"\$p: \$s\"; exit 1; }; done"
left=()
while read -r f; do
    # A directory stays only when another package owns it (/usr/bin, /etc/slurm, ...).
    [[ $f == /. ]] && continue
    if [[ -d $f ]]; then
        # On a merged /usr (trixie, sid) /lib/systemd is /usr/lib/systemd, owned under that name.
        dpkg -S "$f" >/dev/null 2>&1 || dpkg -S "$(realpath "$f")" >/dev/null 2>&1 || [[ -L $f ]] || left+=("$f")
    elif [[ -e $f || -L $f ]]; then
        left+=("$f")
    fi
done < <(cat "$WORK"/files-*)
for f in /var/lib/sparesd /run/sparesd /run/spares /etc/spares; do
    [[ -e $f ]] && left+=("$f")
done
if ((${#left[@]} == 0)); then pass "after purge nothing of the packages is left (files, state, conffiles)"; else fail "left after purge" "${left[*]}"; fi
check "after purge no sparesd user, no unit state" bash -c \
    '! getent passwd sparesd && ! getent group sparesd && ! ls /etc/systemd/system/*/sparesd.service /etc/systemd/system/sparesd.service 2>/dev/null'

finish
