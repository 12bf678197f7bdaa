#!/bin/bash
# `kvmesh top` in a terminal of a set size (tmux): on a mesh of its own
# (nats-server, an index shard, two agents, a router), at 80 and 120
# columns: every line fits, the worker table is there, s sorts, / filters,
# q quits; --json and --once for scripts.
# usage: top_test.sh KVMESH_BINARY
set -euo pipefail
bin=$1
fails=0
tmp=$(mktemp -d)
pids=()  # every process this script starts, stopped at exit
sock=kvmesh-top-test-$$

. "$(dirname "$0")/lib.sh"
trap 'tmux -L "$sock" kill-server 2>/dev/null || true; cleanup' EXIT

start_nats
common=(--nats "$url" --heartbeat-ms 200)
"$bin" index "${common[@]}" --shard 0/1 --db "$tmp/db" 2>"$tmp/index.err" &
pids+=($!)
"$bin" agent "${common[@]}" --name node-a --engine sim --workers 20 \
  --worker-id 0 --block-tokens 16 2>"$tmp/agent-a.err" &
pids+=($!)
"$bin" agent "${common[@]}" --name node-b --engine sim --workers 20 \
  --worker-id 20 --block-tokens 16 2>"$tmp/agent-b.err" &
pids+=($!)
"$bin" router "${common[@]}" --name router-t --block-tokens 16 \
  2>"$tmp/router.err" &
pids+=($!)
if ! poll 15 admin --nats "$url" workers --json -- \
  "assert sum(w['state'] == 'live' for w in d['workers']) == 40"; then
  fail mesh_starts "$(cat "$tmp"/*.err)"
  exit 1
fi
"$bin" route --nats "$url" --block-tokens 16 --tokens "$(seq -s, 1 48)" \
  >/dev/null

# screen NAME: the pane of session NAME as text.
screen() { tmux -L "$sock" capture-pane -p -t "$1"; }

# until_screen NAME TEXT: until the pane shows TEXT (10 s); 1 if never.
until_screen() {
  local end=$((SECONDS + 10))
  until screen "$1" | grep -qF -- "$2"; do
    [ "$SECONDS" -lt "$end" ] || return 1
    sleep 0.1
  done
}

for width in 80 120; do
  s=top$width
  tmux -L "$sock" new-session -d -s "$s" -x "$width" -y 30 \
    "$bin top --nats $url --interval-ms 300 2>$tmp/top$width.err"
  if ! until_screen "$s" "workers 1-"; then
    fail "top_${width}_draws" "$(screen "$s"; cat "$tmp/top$width.err")"
    continue
  fi
  # A frame with rates (the second), then every line within the width.
  until_screen "$s" "rates over" || true
  pane=$(screen "$s")
  long=$(awk -v w="$width" 'length($0) > w' <<<"$pane")
  if [ -z "$long" ] && grep -q "^worker  *state .* queued" <<<"$pane" &&
    grep -q "^router" <<<"$pane"; then
    ok "top_${width}_fits"
  else
    fail "top_${width}_fits" "$pane"
  fi
  tmux -L "$sock" send-keys -t "$s" s
  if until_screen "$s" "sort: queued"; then
    ok "top_${width}_sorts"
  else
    fail "top_${width}_sorts" "$(screen "$s")"
  fi
  tmux -L "$sock" send-keys -t "$s" / n o d e - b Enter
  if until_screen "$s" "filter: node-b" &&
    until_screen "$s" "of 20" && ! screen "$s" | grep -q "node-a"; then
    ok "top_${width}_filters"
  else
    fail "top_${width}_filters" "$(screen "$s")"
  fi
  tmux -L "$sock" send-keys -t "$s" q
  end=$((SECONDS + 5))
  while tmux -L "$sock" has-session -t "$s" 2>/dev/null; do
    [ "$SECONDS" -lt "$end" ] || break
    sleep 0.1
  done
  if tmux -L "$sock" has-session -t "$s" 2>/dev/null; then
    fail "top_${width}_q_quits" "$(screen "$s")"
  else
    ok "top_${width}_q_quits"
  fi
done

# For scripts: one JSON object with rates, and one plain frame.
run top --nats "$url" --interval-ms 300 --json
if [ "$rc" -eq 0 ] && jtest 'assert len(d["workers"]) == 40, d
assert all("awards_per_s" in w for w in d["workers"]), d
assert d["routers"][0]["name"] == "router-t", d'; then
  ok top_json
else
  fail top_json "exit $rc: $out $err"
fi
run top --nats "$url" --interval-ms 300 --once --sort queued --filter node-a
if [ "$rc" -eq 0 ] && grep -q "^19 " <<<"$out" && ! grep -q "^20 " <<<"$out"
then
  ok top_once
else
  fail top_once "exit $rc: $out $err"
fi
run top --nats "$url" --sort loudest
if [ "$rc" -eq 2 ] && grep -q -- "--sort: 'loudest'" <<<"$err"; then
  ok top_bad_sort
else
  fail top_bad_sort "exit $rc: $err"
fi

if [ "$fails" -gt 0 ]; then
  echo "$fails failed"
  exit 1
fi
echo "all passed"
