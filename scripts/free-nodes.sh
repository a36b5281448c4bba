#!/usr/bin/env bash
# Writes the free-node file that job_submit_spares.so reads (the policy's
# `free_nodes_file`): the nodes that are idle now, one per line, from sinfo.
# The plugin never asks slurmctld itself (it runs under slurmctld's locks);
# this script (until sparesd keeps the file) runs outside slurmctld.
#
#   scripts/free-nodes.sh FILE              write FILE once
#   scripts/free-nodes.sh --loop SECS FILE  rewrite it every SECS seconds
#
# The file is replaced atomically (write, then rename), so the plugin never
# reads half of it. If sinfo fails, the old file is kept.
set -uo pipefail

write_once() {
    local file=$1 tmp
    tmp=$(mktemp "$file.XXXXXX") || return 1
    if sinfo -h -N -t idle -o %N 2>/dev/null | sort -u >"$tmp"; then
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
