#!/bin/bash
# scripts/sim_matrix.py --replay on a matrix of two scenarios written by
# `kvmesh sim --policy all --json`: replayed as they are, kvmesh's figures
# and the excess ratios come back the same; with a price flag they change;
# a bad invocation exits 2.
# usage: sim_matrix_test.sh KVMESH_BINARY SOURCE_DIR
set -euo pipefail
bin=$1
src=$2
matrix="$src/scripts/sim_matrix.py"
trace="$src/tests/data/conversation_head.jsonl"
fails=0
tmp=$(mktemp -d)
pids=()
. "$(dirname "$0")/lib.sh"

mkdir "$tmp/m"
for w in 2 4; do
  "$bin" sim --trace "$trace" --workers "$w" --gpu-blocks 256 --host-blocks 0 \
    --disk-blocks 0 --speedup 0.2 --policy all --seed 1 --quiet \
    --json "$tmp/m/w$w.json" > /dev/null
done
# kvmesh's recorded mean TTFT per scenario, as the matrix prints it.
recorded() {
  python3 - "$tmp/m/$1.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print(f"{[x for x in d['results'] if x['policy'] == 'kvmesh'][0]['ttft_ms']['mean']:.0f}")
PY
}
kvmesh_mean() {  # the replay's kvmesh mean for scenario $2 in output $1
  awk -F'|' -v n="$2" '$2 ~ " "n" " {gsub(/ /, "", $4); print $4}' "$1"
}

if python3 "$matrix" --replay "$tmp/m" "$bin" > "$tmp/same.md" 2> "$tmp/err"; then
  ok "replay runs"
else
  fail "replay runs" "$(cat "$tmp/err")"
fi
for s in w2 w4; do
  got=$(kvmesh_mean "$tmp/same.md" "$s")
  want=$(recorded "$s")
  if [ -n "$got" ] && [ "$got" = "$want" ]; then
    ok "replayed as recorded: $s kvmesh mean $got ms"
  else
    fail "replayed as recorded: $s" "got '$got', recorded '$want'"
  fi
done
if grep -q "^2 scenarios; geometric mean of the excess ratio" "$tmp/same.md"; then
  ok "the summary counts both scenarios"
else
  fail "the summary counts both scenarios" "$(tail -3 "$tmp/same.md")"
fi

python3 "$matrix" --replay "$tmp/m" "$bin" --beta 50 > "$tmp/beta.md" 2>&1 ||
  fail "replay with a price flag runs" "$(cat "$tmp/beta.md")"
if ! cmp -s <(grep "^| w" "$tmp/same.md") <(grep "^| w" "$tmp/beta.md"); then
  ok "a price flag reaches kvmesh (its rows change with --beta 50)"
else
  fail "a price flag reaches kvmesh" "rows identical"
fi

set +e
python3 "$matrix" --replay "$tmp/nothing-here" "$bin" > /dev/null 2>&1
rc=$?
set -e
if [ "$rc" = 2 ]; then ok "a missing matrix exits 2"; else fail "a missing matrix exits 2" "rc $rc"; fi

[ "$fails" = 0 ] || { echo "$fails failed"; exit 1; }
echo "all passed"
