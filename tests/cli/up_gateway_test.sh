#!/bin/bash
# `kvmesh up --gateway` end to end: the mesh with simulated GPUs served as
# vLLM serves real ones (kvmesh engine --serve: OpenAI API, /tokenize,
# /v1/models, /metrics, KV events over ZMQ), real-engine agents beside them,
# and the gateway; the official OpenAI SDK (tests/npm) as the client: chat
# and completions, streaming and not, a 404 for an unknown model, and a
# conversation's second turn on the GPU that cached its first, seen in the
# answers' X-Kvmesh-Worker and in `kvmesh admin workers`. Then a stop by
# SIGINT leaves no process behind.
# usage: up_gateway_test.sh KVMESH_BINARY NPM_DIR
set -uo pipefail
bin=$1
npm_dir=$2
fails=0
tmp=$(mktemp -d)
pids=()
. "$(dirname "$0")/lib.sh"
client=$(cd "$(dirname "$0")/../gateway" && pwd)/openai_client.mjs

port=$(free_port)
"$bin" up --workers 2 --block-tokens 16 --heartbeat-ms 200 \
  --gateway "127.0.0.1:$port" --data-dir "$tmp/mesh" \
  >"$tmp/up.out" 2>"$tmp/up.err" &
up=$!
pids+=($up)
base=http://127.0.0.1:$port/v1
ready=0
for _ in $(seq 300); do
  if curl -sf "$base/models" 2>/dev/null | grep -q '"kvmesh-sim"'; then
    ready=1
    break
  fi
  sleep 0.1
done
if [ "$ready" = 1 ]; then ok "the gateway lists the simulated GPUs' model"
else fail "gateway_ready" "$(cat "$tmp/up.out" "$tmp/up.err")"; fi
url=$(sed -n 's/^nats-server \(nats:[^ ]*\).*/\1/p' "$tmp/up.out" | head -1)
if grep -q "^OpenAI API: http://127.0.0.1:$port/v1 (model kvmesh-sim)" \
  "$tmp/up.out"; then ok "up prints the OpenAI API's URL"
else fail "url_printed" "$(cat "$tmp/up.out")"; fi
for role in engine agent router index gateway; do
  if grep -q "^$role " "$tmp/up.out"; then ok "up started the $role"
  else fail "started_$role" "$(cat "$tmp/up.out")"; fi
done

# Both workers live, each with its front and the model, before the client.
if poll 20 admin --nats "$url" workers --json -- \
  'assert sum(1 for w in d["workers"] if w["endpoint"].startswith("http://127.0.0.1:") and "kvmesh-sim" in [m["name"] for m in w["models"]]) == 2'
then ok "admin sees both GPUs with their fronts and model"
else fail "workers_live" "$out $err"; fi

seen=$(node "$client" "$npm_dir" "$base" kvmesh-sim 2>"$tmp/client.err")
rc=$?
if [ "$rc" = 0 ]; then ok "the OpenAI SDK's checks pass: $(tr '\n' ' ' <"$tmp/client.err")"
else fail "openai_client" "$(cat "$tmp/client.err")"; fi
turn=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["turn1_worker"])' "$seen" 2>/dev/null)
# The second turn reused the first turn's blocks on that GPU: its KV events
# reached the index, and the admin's view of the worker counts the hits.
if poll 10 admin --nats "$url" workers --json -- \
  "w = [w for w in d['workers'] if str(w['id']) == '$turn'][0]; assert w['awards'] >= 2 and w['gpu_blocks'] > 0"
then ok "worker $turn was awarded both turns and holds their blocks"
else fail "turns_on_worker" "turn1 on '$turn': $out"; fi
if curl -s "http://127.0.0.1:$port/v1/chat/completions" \
  -H 'Content-Type: application/json' -d '{"model": "kvmesh-sim"}' |
  grep -q '"param":"messages"'; then ok "a body without messages is a 400 naming it"
else fail "bad_body"; fi

kill -INT "$up"
end=$((SECONDS + 15))
while kill -0 "$up" 2>/dev/null && [ "$SECONDS" -lt "$end" ]; do sleep 0.1; done
if ! kill -0 "$up" 2>/dev/null; then
  wait "$up"
  rc=$?
  if [ "$rc" = 0 ]; then ok "up stops on SIGINT with 0"
  else fail "up_exit" "rc $rc: $(tail -5 "$tmp/up.err")"; fi
else fail "up_stops" "still running"; fi
left=$(pgrep -f -- "--data-dir $tmp/mesh|$tmp/mesh" | wc -l)
if [ "$left" = 0 ]; then ok "no child is left"
else fail "children_left" "$(pgrep -af -- "$tmp/mesh")"; fi

[ "$fails" -eq 0 ] || { echo "$fails failed"; exit 1; }
echo "all passed"
