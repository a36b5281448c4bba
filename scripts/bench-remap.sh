#!/usr/bin/env bash
# Re-mapping against the anchors (issue 14, docs/remap.md): the dead sets of sliding's final
# maps (`spares substitute --fail-random K --seed S`) through hybrid, hybrid:least-load, Scotch
# (scotch_gmap of the compute grid's 7-point stencil graph onto a `sub` of mesh3D holding the
# alive nodes) and `spares remap` at several move budgets and time limits. Prints a Markdown
# table of mean and worst collisions and mean moved ranks per K and method; raw rows go to
# $OUT/rows.csv.
#
#   scripts/bench-remap.sh                      # seeds 1..20, K=50,100,276 on 12x12x12, 1128 on 24^3
#   SEEDS="1 2 3" CASES="12:50 12:276" scripts/bench-remap.sh
#   ITERATIONS="250000" scripts/bench-remap.sh  # iteration caps instead of TIMES: the same maps on
#                                               # every machine, whatever its load
#
# Needs jq and scotch (scripts/setup.sh installs both) and a release build of spares.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
spares=${SPARES:-$root/target/release/spares}
SEEDS=${SEEDS:-$(seq 1 20)}
CASES=${CASES:-"12:50 12:100 12:276 24:1128"}
# Remap variants: label, then the flags.
BUDGETS=${BUDGETS:-"10 50 200 any"}
TIMES=${TIMES:-"0.1 1"}
# Iteration caps (candidates evaluated); when set, they replace TIMES.
ITERATIONS=${ITERATIONS:-}
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"
command -v jq >/dev/null || { echo "bench-remap: jq is missing (scripts/setup.sh)" >&2; exit 1; }
command -v scotch_gmap >/dev/null || { echo "bench-remap: scotch is missing (scripts/setup.sh)" >&2; exit 1; }
[ -x "$spares" ] || (cd "$root" && cargo build --release -q -p spares-cli)

collisions() { "$spares" collisions --map "$1" --json | jq -r .collisions; }

# Scotch's mapping of map $1's compute grid onto its alive nodes, as a map document on stdout.
scotch_map() {
    local doc=$1 dir=$2
    read -r bx by bz < <(jq -r '.box | @tsv' "$doc")
    read -r cx cy cz < <(jq -r '.compute | @tsv' "$doc")
    # Alive nodes in box order (dimension 0 fastest), as mesh3D terminal numbers.
    jq -r '.failed[] | "\(.[0] + '"$bx"' * (.[1] + '"$by"' * .[2]))"' "$doc" > "$dir/dead"
    awk -v n=$((bx * by * bz)) '{ dead[$1] = 1 } END { for (i = 0; i < n; i++) if (!(i in dead)) print i }' \
        "$dir/dead" > "$dir/alive"
    { echo sub; echo "$(wc -l < "$dir/alive") $(tr '\n' ' ' < "$dir/alive")"; echo "mesh3D $bx $by $bz"; } > "$dir/t.tgt"
    gmk_m3 "$cx" "$cy" "$cz" "$dir/g.grf"
    scotch_gmap "$dir/g.grf" "$dir/t.tgt" "$dir/out.map" >/dev/null 2>&1
    # Scotch balances loads but may put two ranks on one node: extras go to the nearest alive
    # node left free, so that the result is a map (a bijection) our model can route.
    awk -v bx="$bx" -v by="$by" 'NR == FNR { alive[n++] = $1; next }
        FNR == 1 { next }
        { rank[$1] = alive[$2] }
        END {
            for (r = 0; r in rank; r++) { t = rank[r]; if (t in used) extra[r] = 1; else used[t] = 1 }
            for (r in extra) {
                t = rank[r]; x = t % bx; y = int(t / bx) % by; z = int(t / (bx * by)); best = -1
                for (i = 0; i < n; i++) { a = alive[i]; if (a in used) continue
                    d = (a % bx - x)^2 + (int(a / bx) % by - y)^2 + (int(a / (bx * by)) - z)^2
                    if (best < 0 || d < bd) { best = a; bd = d } }
                rank[r] = best; used[best] = 1
            }
            for (r = 0; r in rank; r++) { t = rank[r]; printf "[%d,%d,%d]\n", t % bx, int(t / bx) % by, int(t / (bx * by)) }
        }' "$dir/alive" "$dir/out.map" | jq -s . > "$dir/ranks.json"
    jq --slurpfile r "$dir/ranks.json" '.ranks = $r[0] | del(.traffic)' "$doc"
}

echo "n,k,seed,method,collisions,moved,iterations" > "$OUT/rows.csv"
for case in $CASES; do
    n=${case%%:*}; k=${case##*:}
    for seed in $SEEDS; do
        dir="$OUT/$n-$k-$seed"; mkdir -p "$dir"
        for m in hybrid hybrid:least-load; do
            "$spares" substitute -n "${n}x${n}x${n}" --spares '3D(2,1)' -m "$m" --fail-random "$k" \
                --seed "$seed" --no-moves -o "$dir/$m.json" >/dev/null
            echo "$n,$k,$seed,$m,$(collisions "$dir/$m.json"),0,0" >> "$OUT/rows.csv"
        done
        scotch_map "$dir/hybrid.json" "$dir" > "$dir/scotch.json"
        moved=$(jq -n --slurpfile a "$dir/hybrid.json" --slurpfile b "$dir/scotch.json" \
            '[range($a[0].ranks | length) as $i | select($a[0].ranks[$i] != $b[0].ranks[$i])] | length')
        echo "$n,$k,$seed,scotch,$(collisions "$dir/scotch.json"),$moved,0" >> "$OUT/rows.csv"
        if [ -n "$ITERATIONS" ]; then limits=$ITERATIONS; else limits=$TIMES; fi
        for t in $limits; do
            for b in $BUDGETS; do
                if [ -n "$ITERATIONS" ]; then
                    flags=(--iterations "$t" --seed "$seed"); label="$t candidates"
                else
                    flags=(--time-limit "$t" --seed "$seed"); label="${t}s"
                fi
                [ "$b" = any ] || flags+=(--max-moves "$b")
                "$spares" remap --map "$dir/hybrid.json" "${flags[@]}" --json > "$dir/remap.json"
                echo "$n,$k,$seed,remap $b moves $label,$(jq -r .after.collisions "$dir/remap.json"),$(jq -r '"\(.moved),\(.iterations)"' "$dir/remap.json")" >> "$OUT/rows.csv"
            done
        done
    done
done

echo "| network | K | method | mean collisions | worst | mean moved ranks | mean candidates |"
echo "| --- | --- | --- | --- | --- | --- | --- |"
awk -F, 'NR > 1 { key = $1 "," $2 "," $4; if (!(key in cnt)) order[++m] = key
        cnt[key]++; sum[key] += $5; mv[key] += $6; it[key] += $7; if ($5 > worst[key]) worst[key] = $5 }
    END { for (i = 1; i <= m; i++) { key = order[i]; split(key, f, ",")
        printf "| %sx%sx%s | %s | %s | %.2f | %d | %.1f | %d |\n", f[1], f[1], f[1], f[2], f[3],
            sum[key] / cnt[key], worst[key], mv[key] / cnt[key], it[key] / cnt[key] } }' "$OUT/rows.csv"
echo
echo "raw rows: $OUT/rows.csv"
