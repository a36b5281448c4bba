# Shared by tests/cluster/e2e.sh and scripts/demo.sh (sourced, not run): the stencil job with
# spares, node deaths, and the waits between them. Needs DIR (the cluster directory), SLURM_CONF
# and BIN (the release binaries) set by the caller.

# The job script: spares-run starts spares-stencil on the job's spare map, restarts it after each
# node death, then the story sparesd tells is saved (the epilog releases the job from sparesd).
# Args: work directory, iterations, milliseconds of "work" per iteration, halo-bench arguments
# (empty: no measurement).
e2e_write_job() {
    local work=$1 iters=$2 delay=$3 bench=${4:-}
    cat >"$work/job.sh" <<EOF
#!/bin/bash
cd "$work"
"$BIN/spares-run" --dir "$work/run-\$SLURM_JOB_ID" -- \\
    "$BIN/spares-stencil" --cells 16 --iters $iters --ckpt-every 20 --delay-ms $delay
rc=\$?
"$BIN/sparesctl" show \$SLURM_JOB_ID --json >"$work/show-\$SLURM_JOB_ID.json"
"$BIN/sparesctl" show \$SLURM_JOB_ID >"$work/show-\$SLURM_JOB_ID.txt"
if [ -n "$bench" ] && [ \$rc = 0 ]; then
    "$BIN/spares-halo-bench" --dir "$work/bench-\$SLURM_JOB_ID" $bench || rc=\$?
fi
exit \$rc
EOF
    chmod +x "$work/job.sh"
}

# Submits the job script with spares: prints the job id.
e2e_submit() {
    local work=$1
    sbatch --parsable -N32 --no-kill '--spares=3D(2,1)' --job-shape=3x3x2 \
        -o "$work/job-%j.out" -D "$work" "$work/job.sh"
}

# Waits (up to $3 s) until the job's output has a line matching the extended regex $2;
# returns 1 on timeout or when the job ended first.
e2e_wait_line() {
    local out=$1 re=$2 secs=${3:-120} end=$((SECONDS + ${3:-120}))
    while ((SECONDS < end)); do
        grep -qE "$re" "$out" 2>/dev/null && return 0
        sleep 0.2
    done
    return 1
}

# Waits until launch $3 of job output $2 has written a checkpoint (so the node death below
# lands in the middle of a run).
e2e_wait_progress() {
    local out=$1 launch=$2 secs=${3:-120} end=$((SECONDS + ${3:-120}))
    while ((SECONDS < end)); do
        if [[ -s $out ]] &&
            awk -v l="launch $launch:" '/^spares-run: / && index($0, l) { on = 1; next }
                on && /^checkpoint: iteration/ { found = 1 } END { exit !found }' "$out"; then
            return 0
        fi
        sleep 0.2
    done
    return 1
}

# Kills a node as a node death would: its slurmd (PID recorded by cluster.sh), then the job
# processes running "on" it: tasks of this cluster whose environment says
# SLURMD_NODENAME=<node>, and their parents, the node's slurmstepd's. Prints what it killed.
e2e_kill_node() {
    local node=$1 pid p pp env killed=()
    pid=$(awk -v n="slurmd-$node" '$1 == n { print $2 }' "$DIR/run/pids" | tail -1)
    [[ -n $pid ]] && kill -9 "$pid" 2>/dev/null && killed+=("slurmd($pid)")
    for p in $(pgrep -x spares-stencil) $(pgrep -x spares-halo-ben); do
        env=$(tr '\0' '\n' 2>/dev/null <"/proc/$p/environ") || continue
        if grep -qx "SLURMD_NODENAME=$node" <<<"$env" && grep -qx "SLURM_CONF=$SLURM_CONF" <<<"$env"; then
            pp=$(awk '{ print $4 }' 2>/dev/null <"/proc/$p/stat")
            if [[ -n $pp && $(cat 2>/dev/null <"/proc/$pp/comm") == slurmstepd ]]; then
                kill -9 "$pp" 2>/dev/null && killed+=("slurmstepd($pp)")
            fi
            kill -9 "$p" 2>/dev/null && killed+=("$(cat 2>/dev/null <"/proc/$p/comm" || echo task)($p)")
        fi
    done
    echo "${killed[*]}"
}

# The last recorded sparesd PID, when it is still sparesd.
e2e_sparesd_pid() {
    local pid
    pid=$(awk '$1 == "sparesd" { p = $2 } END { print p }' "$DIR/run/pids")
    [[ -n $pid ]] && tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q sparesd && echo "$pid"
}

# Waits until job $1 has left the queue (or $2 s).
e2e_wait_job_end() {
    local job=$1 end=$((SECONDS + ${2:-300}))
    while ((SECONDS < end)); do
        case $(squeue -h -j "$job" -o %T 2>/dev/null) in
            "" | COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL) return 0 ;;
        esac
        sleep 0.5
    done
    return 1
}

# The job's final state and exit code, from slurmctld's record (kept for MinJobAge).
e2e_job_state() {
    scontrol show job "$1" 2>/dev/null | tr ' ' '\n' | awk -F= '$1 == "JobState" || $1 == "ExitCode" { printf "%s ", $2 }'
}

# "rank node" lines of launch $2 in job output $1, in rank order.
e2e_ranks_of_launch() {
    awk -v a="$2" '$1 == "rank" && $3 == "attempt" && $4 == a && $5 == "on" { print $2, $6 }' "$1" | sort -n
}

# The checksum the job printed.
e2e_checksum() {
    awk '/^result:/ { for (i = 1; i <= NF; i++) if ($i == "checksum") print $(i + 1) }' "$1" | tail -1
}
