#!/usr/bin/env bash
# Writes the free-node file that job_submit_spares.so reads (the policy's
# `free_nodes_file`), version 2 (docs/admin.md): every node with its state
# (free, busy, unusable) and its partitions, one line per node and partition
# as `sinfo -N` prints them.
# The plugin never asks slurmctld itself (it runs under slurmctld's locks);
# this script (until sparesd keeps the file) runs outside slurmctld.
#
#   scripts/free-nodes.sh FILE              write FILE once
#   scripts/free-nodes.sh --loop SECS FILE  rewrite it every SECS seconds
#
# The file is replaced atomically (write, fsync, then rename), so the plugin
# never reads half of it. If sinfo fails, the old file is kept.
set -uo pipefail

write_once() {
    local file=$1 tmp
    tmp=$(mktemp "$file.XXXXXX") || return 1
    # %t: the compact state with its flag (idle, alloc, mix, down*, idle~, ...); %P: the
    # partition, `*` marking the default one.
    if sinfo -h -N -o '%N %t %P' 2>/dev/null | awk '
        {
            st = $2; flag = ""
            if (st ~ /[*~%$#!@^-]$/) { flag = substr(st, length(st)); st = substr(st, 1, length(st) - 1) }
            if (flag ~ /[*~%$]/) s = "unusable"                 # not responding, powered down, maintenance
            else if (st ~ /^(down|drain|drng|draining|drained|fail|failg|failing|maint|futr|future|unk|unknown|npc|inval|pow_dn)$/) s = "unusable"
            else if (st == "idle" && flag == "") s = "free"
            else s = "busy"                                     # alloc, mix, comp, resv, powering up, ...
            print $1, "state=" s, "partitions=" $3
        }' >"$tmp" && [[ -s $tmp ]] && sync "$tmp"; then
        mv -f "$tmp" "$file"
    else
        rm -f "$tmp"
        return 1
    fi
}

if [[ ${1:-} == --loop ]]; then
    secs=${2:?usage: $0 --loop SECS FILE}
    file=${3:?usage: $0 --loop SECS FILE}
    trap 'exit 0' TERM INT
    while :; do
        write_once "$file"
        sleep "$secs" &
        wait $!
    done
else
    write_once "${1:?usage: $0 FILE | --loop SECS FILE}"
fi
