#!/bin/bash
# Opens the HTML reports of `kvmesh sim --report` and `kvmesh bench --report`
# in headless Chromium and checks that the charts rendered: each chart is in
# the DOM Chromium built, with the marks its data calls for, and the
# screenshot shows the charts' colours.
# usage: report_test.sh KVMESH_BINARY DATA_DIR
set -euo pipefail
bin=$1
data=$2
check="$(dirname "$0")/report_check.py"
fails=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

ok() { echo "ok   $1"; }
fail() {
  echo "FAIL $1${2:+: $2}"
  fails=$((fails + 1))
}

chromium=${CHROMIUM:-chromium}
if ! command -v "$chromium" >/dev/null 2>&1; then
  echo "FAIL chromium_present: no $chromium in PATH (Debian's chromium;" \
    "scripts/install-deps --tests installs it)"
  exit 1
fi
# The sandbox needs user namespaces that containers and CI runners often
# lack; the page is our own.
browse() {
  HOME="$tmp" timeout 120 "$chromium" --headless --disable-gpu --no-sandbox \
    --no-first-run --user-data-dir="$tmp/profile" --hide-scrollbars "$@" \
    2>>"$tmp/chromium.log"
}

# rendered NAME HTML SPEC: Chromium's DOM of HTML holds the charts of SPEC
# (see report_check.py).
rendered() {
  local why
  if ! browse --dump-dom "file://$2" >"$tmp/$1.dom"; then
    fail "$1" "chromium failed: $(tail -n 3 "$tmp/chromium.log")"
  elif ! why=$(python3 "$check" dom "$tmp/$1.dom" "$3"); then
    fail "$1" "$why"
  else
    ok "$1"
  fi
}

# painted NAME HTML COLOUR:MIN...: a screenshot of HTML is not blank and has
# at least MIN pixels of each COLOUR.
painted() {
  local name=$1 page=$2 why
  shift 2
  if ! browse --window-size=1000,3000 --force-device-scale-factor=0.5 \
    --screenshot="$tmp/$name.png" "file://$page" >/dev/null; then
    fail "$name" "chromium failed: $(tail -n 3 "$tmp/chromium.log")"
  elif ! why=$(python3 "$check" png "$tmp/$name.png" "$@"); then
    fail "$name" "$why"
  else
    ok "$name"
  fi
}

# self_contained NAME HTML: nothing in the page loads from elsewhere.
self_contained() {
  local found
  found=$(grep -Eo '<script|<link|<img|<iframe| src=| href=|url\(|@import|https?://[^"]*' "$2" |
    grep -v '^http://www.w3.org/2000/svg$' | sort -u | tr '\n' ' ' || true)
  if [ -n "$found" ]; then fail "$1" "loads or runs: $found"; else ok "$1"; fi
}

# -- kvmesh sim --report --------------------------------------------------------

policies=kvmesh,round_robin,prefix
rc=0
"$bin" sim --trace "$data/conversation_head.jsonl" --workers 4 --quiet \
  --policy "$policies" --report "$tmp/sim.html" >"$tmp/sim.out" \
  2>"$tmp/sim.err" || rc=$?
if [ "$rc" -ne 0 ] || [ ! -s "$tmp/sim.html" ]; then
  fail sim_report_written "exit $rc: $(cat "$tmp/sim.err")"
else
  ok sim_report_written
fi
self_contained sim_report_self_contained "$tmp/sim.html"
# 3 policies and the oracle; a line per worker (4); 3 policies x 4 workers.
sim_spec='{
  "ttft-cdf": {"path": 4, "text": ["kvmesh", "round_robin", "prefix", "oracle"]},
  "queued-kvmesh": {"path": 4},
  "queued-round_robin": {"path": 4},
  "queued-prefix": {"path_min": 1},
  "hit-ratio": {"rect_min": 5, "text": ["kvmesh", "GPU", "host", "disk"]},
  "requests": {"rect": 12, "text": ["kvmesh", "round_robin", "prefix"]}}'
rendered sim_report_charts_rendered "$tmp/sim.html" "$sim_spec"
if why=$(python3 "$check" table "$tmp/sim_report_charts_rendered.dom" \
  "$tmp/sim.out"); then
  ok sim_report_table_as_text
else
  fail sim_report_table_as_text "$why"
fi
# The checker must catch a missing chart and a chart without marks.
sed 's/id="requests"/id="elsewhere"/' "$tmp/sim_report_charts_rendered.dom" \
  >"$tmp/broken1.dom"
sed '/id="ttft-cdf"/,/<\/svg>/ s/class="mark"/class="gone"/g' \
  "$tmp/sim_report_charts_rendered.dom" >"$tmp/broken2.dom"
if python3 "$check" dom "$tmp/broken1.dom" "$sim_spec" >/dev/null ||
  python3 "$check" dom "$tmp/broken2.dom" "$sim_spec" >/dev/null; then
  fail checker_catches_broken_charts "a broken page passed"
else
  ok checker_catches_broken_charts
fi
# Series 1 and 2 (lines, GPU and host bars) and the fullest heatmap cell.
painted sim_report_painted "$tmp/sim.html" '#4e79a7:300' '#f28e2b:300' \
  '#1f4e8a:50'

rc=0
"$bin" sim --trace "$data/conversation_head.jsonl" --workers 4 --quiet \
  --policy kvmesh --report "$tmp/no/such/dir/r.html" >/dev/null \
  2>"$tmp/err" || rc=$?
if [ "$rc" -ne 0 ] && grep -q "no/such/dir/r.html" "$tmp/err"; then
  ok sim_report_unwritable
else
  fail sim_report_unwritable "exit $rc: $(cat "$tmp/err")"
fi

# -- kvmesh bench --report ------------------------------------------------------
# A short replay through the mesh as processes; heartbeats every 100 ms
# give the queued-work chart samples.

rc=0
"$bin" bench --trace "$data/conversation_head.jsonl" --limit 100 --workers 4 \
  --time-scale 20 --heartbeat-ms 100 --baseline-samples 100 \
  --report "$tmp/bench.html" >"$tmp/bench.out" 2>"$tmp/bench.err" || rc=$?
# Exit 1 with a report is a replay that lost requests on a loaded machine:
# the page is still what is tested here.
if [ ! -s "$tmp/bench.html" ]; then
  fail bench_report_written "exit $rc: $(tail -n 5 "$tmp/bench.err")"
else
  [ "$rc" -eq 0 ] || echo "note: bench exit $rc: $(tail -n 2 "$tmp/bench.err")"
  ok bench_report_written
  self_contained bench_report_self_contained "$tmp/bench.html"
  rendered bench_report_charts_rendered "$tmp/bench.html" '{
    "ttft-cdf": {"path": 2, "text": ["kvmesh", "oracle"]},
    "queued-kvmesh": {"path": 4},
    "hit-ratio": {"rect_min": 1},
    "requests": {"rect": 4, "text": ["kvmesh"]}}'
  painted bench_report_painted "$tmp/bench.html" '#4e79a7:300'
  # Imbalance from the polled queues: max/mean is at least 1, or "-" when
  # too few polls measured it; never the 0.00 of a column left unset.
  imbal=$(awk '$1 == "kvmesh" { print $NF }' "$tmp/bench.out")
  if [ "$imbal" = "-" ] ||
    awk -v v="$imbal" 'BEGIN { exit !(v ~ /^[0-9.]+$/ && v + 0 >= 1) }'; then
    ok bench_imbalance_measured
  else
    fail bench_imbalance_measured "kvmesh row ends in '$imbal'"
  fi
fi

[ "$fails" -eq 0 ] || { echo "$fails report checks failed"; exit 1; }
