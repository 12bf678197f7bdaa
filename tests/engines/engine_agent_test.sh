#!/bin/bash
# Runs `kvmesh agent --engine vllm` beside the stand-in engine
# (standin_engine.py: vLLM's KV events and OpenAI API) on a real
# nats-server with a router and an index shard, and checks that the mesh
# sees exactly the engine's cache, recovers from lost and garbled events,
# and follows a request through the front.
# usage: engine_agent_test.sh KVMESH_BINARY STANDIN_SCRIPT PYTHON3
# Not -e: a failed check is counted, and the checks after it still run.
set -uo pipefail
bin=$1
standin=$2
py=$3  # a python3 with the zmq and msgpack modules (Debian's)
fails=0
tmp=$(mktemp -d)
pids=()

. "$(dirname "$0")/../cli/lib.sh"

# http METHOD URL [BODY]: the answer's body in $out, curl-free.
http() {
  out=$(python3 - "$@" <<'EOF'
import sys, urllib.request
method, url = sys.argv[1], sys.argv[2]
data = sys.argv[3].encode() if len(sys.argv) > 3 else None
req = urllib.request.Request(url, data=data, method=method,
                             headers={"Content-Type": "application/json"})
try:
    with urllib.request.urlopen(req, timeout=10) as r:
        sys.stdout.write(r.read().decode())
except urllib.error.HTTPError as e:
    sys.stdout.write(e.read().decode())
EOF
)
}

ctl() { http POST "http://127.0.0.1:$engine_http/control" "$1"; }
stats() { http GET "$front/kvmesh/stats"; }

# workers_until NAME SECONDS PYTHON: polls `admin workers --json` until
# PYTHON holds for `w`, worker 0's entry.
workers_until() {
  local name=$1 secs=$2 code=$3 end=$((SECONDS + $2))
  while true; do
    run admin --nats "$url" workers --json
    if [ "$rc" -eq 0 ] && jtest "w = [x for x in d['workers'] if x['id'] == 0][0]
$code"; then
      ok "$name"
      return 0
    fi
    if [ "$SECONDS" -ge "$end" ]; then
      fail "$name" "not within $secs s: $out $err"
      return 1
    fi
    sleep 0.1
  done
}

# stats_until NAME SECONDS PYTHON: polls the front's /kvmesh/stats.
stats_until() {
  local name=$1 code=$3 end=$((SECONDS + $2))
  while true; do
    stats
    if jtest "$code"; then
      ok "$name"
      return 0
    fi
    if [ "$SECONDS" -ge "$end" ]; then
      fail "$name" "not within $2 s: $out"
      return 1
    fi
    sleep 0.1
  done
}

seqs() { seq -s, "$1" "$2"; }

# -- the mesh and the engine --------------------------------------------------

nats_port=$(free_port)
url=nats://127.0.0.1:$nats_port
nats-server -a 127.0.0.1 -p "$nats_port" >"$tmp/nats.log" 2>&1 &
pids+=($!)
pub=$(free_port)
replay=$(free_port)
engine_http=$(free_port)
front_port=$(free_port)
"$py" "$standin" --pub-port "$pub" --replay-port "$replay" \
  --http-port "$engine_http" --block-size 4 --topic kv-events \
  --layout map --hashes bytes --gpu-blocks 500 >"$tmp/standin.log" 2>&1 &
pids+=($!)
for _ in $(seq 50); do
  grep -q ready "$tmp/standin.log" && break
  sleep 0.1
done
grep -q ready "$tmp/standin.log" || {
  echo "FAIL standin_starts: $(cat "$tmp/standin.log")"
  exit 1
}
for _ in $(seq 50); do
  python3 -c "import socket; socket.create_connection(('127.0.0.1', \
$nats_port), 0.2)" 2>/dev/null && break
  sleep 0.1
done
agent_metrics=$(free_port)
"$bin" index --nats "$url" --shard 0/1 --db "$tmp/db" --heartbeat-ms 200 \
  >"$tmp/index.log" 2>&1 &
pids+=($!)
"$bin" router --nats "$url" --block-tokens 4 --heartbeat-ms 200 \
  >"$tmp/router.log" 2>&1 &
pids+=($!)
"$bin" agent --nats "$url" --engine vllm --kv-events "tcp://127.0.0.1:$pub" \
  --kv-replay "tcp://127.0.0.1:$replay" --kv-topic kv-events \
  --engine-url "http://127.0.0.1:$engine_http" --block-tokens 4 \
  --worker-id 0 --front-host 127.0.0.1 --front-port "$front_port" \
  --heartbeat-ms 200 --metrics-ms 200 --award-ttl-ms 8000 \
  --metrics-port "$agent_metrics" --metrics-address 127.0.0.1 \
  >"$tmp/agent.log" 2>&1 &
agent=$!
pids+=("$agent")
front=http://127.0.0.1:$front_port

workers_until agent_joins 15 "assert w['state'] == 'live', w
assert w['endpoint'] == '$front', w
assert w['capacity_blocks'] == 500, w  # from the engine's metrics" || {
  cat "$tmp/agent.log"
  exit 1
}
# The models it serves, as the engine's /v1/models lists them.
workers_until models_from_the_engine 5 "assert w['models'] == \
[{'name': 'standin'}], w"
# ZMQ subscriptions take a moment after the connect: events before that are
# lost to any subscriber (and would show as a gap).
sleep 0.5

A=$(seqs 1 12)     # 3 blocks of 4 tokens
A16=$(seqs 1 16)   # the same prefix and one more block

# -- the engine's cache, exactly ---------------------------------------------

ctl "{\"op\": \"store\", \"tokens\": [$A]}"
workers_until stored_on_gpu 5 "assert (w['gpu_blocks'], w['host_blocks']) == \
(3, 0), w"
ctl "{\"op\": \"store\", \"tokens\": [$A], \"medium\": \"CPU\"}"
workers_until offloaded_to_cpu 5 "assert (w['gpu_blocks'], \
w['host_blocks']) == (3, 3), w"
ctl "{\"op\": \"remove\", \"tokens\": [$A], \"last\": 1}"
workers_until evicted_from_gpu 5 "assert (w['gpu_blocks'], \
w['host_blocks']) == (2, 3), w"

# Bids: two blocks on the GPU, the third in host memory, the fourth new.
run route --nats "$url" --block-tokens 4 --tokens "$A16" --json
if [ "$rc" -eq 0 ] && jtest "p = d['prices'][0]
assert d['worker'] == 0 and d['endpoint'] == '$front', d
assert p['credit_gpu'] == 2 and p['credit_host'] == 0.75, p"; then
  ok bid_matches_tiers
else
  fail bid_matches_tiers "exit $rc: $out $err"
fi

# The agent's own /metrics count that award as the bid priced it: 4 prompt
# blocks, 2 held on the GPU and 1 in host memory.
http GET "http://127.0.0.1:$agent_metrics/metrics"
if msg=$(python3 -c '
import sys
s = dict(l.rsplit(" ", 1) for l in sys.stdin.read().splitlines()
         if l and not l.startswith("#"))
w = "worker=\"0\""
# Label pairs sorted by name, as prometheus-cpp prints them.
want = {f"kvmesh_worker_awards_total{{result=\"accepted\",{w}}}": 1,
        f"kvmesh_worker_prompt_blocks_total{{{w}}}": 4,
        f"kvmesh_worker_hit_blocks_total{{tier=\"gpu\",{w}}}": 2,
        f"kvmesh_worker_hit_blocks_total{{tier=\"host\",{w}}}": 1,
        f"kvmesh_worker_capacity_blocks{{{w}}}": 500}
for k, v in want.items():
    assert float(s.get(k, "nan")) == v, (k, s.get(k))
assert any(k.startswith("kvmesh_build_info{") and "role=\"agent\"" in k
           for k in s), "no build_info of role agent"
' <<<"$out" 2>&1); then
  ok agent_metrics_count_the_award
else
  fail agent_metrics_count_the_award "$(tail -n 1 <<<"$msg")"
fi
end=$((SECONDS + 5))
until run admin --nats "$url" prefix --block-tokens 4 --tokens "$A16" \
  --json && jtest "assert d['holders'] == [{'worker': 0, 'gpu': 2, \
'host': 1, 'disk': 0}], d"; do
  [ "$SECONDS" -lt "$end" ] || break
  sleep 0.2
done
if jtest "assert d['holders'] == [{'worker': 0, 'gpu': 2, 'host': 1, \
'disk': 0}], d"; then
  ok index_follows_engine
else
  fail index_follows_engine "$out $err"
fi

ctl '{"op": "clear"}'
workers_until cleared 5 "assert (w['gpu_blocks'], w['host_blocks']) == \
(0, 0), w"

# The other layouts and hash kinds: vLLM 0.9's arrays with integer hashes,
# 0.28's array batches of map events with (SGLang-like) signed ones.
ctl '{"op": "layout", "layout": "array", "hashes": "int"}'
ctl "{\"op\": \"store\", \"tokens\": [$(seqs 101 108)]}"
ctl '{"op": "layout", "layout": "mixed", "hashes": "sint"}'
ctl "{\"op\": \"store\", \"tokens\": [$(seqs 201 204)]}"
workers_until array_and_mixed_layouts 5 "assert w['gpu_blocks'] == 3, w"
ctl '{"op": "layout", "layout": "map", "hashes": "bytes"}'

# -- lost messages ------------------------------------------------------------

# One message lost on the way, still in the engine's replay buffer.
ctl "{\"op\": \"store\", \"tokens\": [$(seqs 301 304)], \"drop\": true}"
ctl "{\"op\": \"store\", \"tokens\": [$(seqs 401 404)]}"
workers_until gap_replayed 5 "assert w['gpu_blocks'] == 5, w"
stats_until gap_counted_as_replay 3 "k = d['kv_events']
assert (k['gaps'], k['replays'], k['resyncs']) == (1, 1, 0), k"

# Lost, and the replay endpoint silent: the worker forgets the cache and
# follows the engine from the next message.
ctl '{"op": "replay", "on": false}'
ctl "{\"op\": \"store\", \"tokens\": [$(seqs 501 504)], \"drop\": true}"
ctl "{\"op\": \"store\", \"tokens\": [$(seqs 601 608)]}"
workers_until gap_resynced 8 "assert w['gpu_blocks'] == 2, w"
stats_until resync_counted 3 "k = d['kv_events']
assert (k['gaps'], k['replays'], k['resyncs']) == (2, 1, 1), k
assert d['worker']['resyncs'] == 1, d['worker']"
ctl '{"op": "replay", "on": true}'

# -- garbage ------------------------------------------------------------------

for kind in frames sequence msgpack batch unknown_event; do
  ctl "{\"op\": \"garbage\", \"kind\": \"$kind\"}"
done
ctl "{\"op\": \"store\", \"tokens\": [$(seqs 701 704)]}"
workers_until garbage_skipped 5 "assert w['gpu_blocks'] == 3, w"
stats_until garbage_counted 3 "k = d['kv_events']
assert k['faults'] == {'frames': 1, 'sequence': 1, 'msgpack': 1, \
'batch': 1, 'event': 0, 'unknown_event': 1}, k['faults']
assert k['gaps'] == 2, k"
if [ "$(grep -c 'kv subscriber skips' "$tmp/agent.log")" -eq 5 ]; then
  ok garbage_logged_once_per_kind
else
  fail garbage_logged_once_per_kind "$(grep 'skips' "$tmp/agent.log")"
fi
for kind in frames msgpack; do
  ctl "{\"op\": \"garbage\", \"kind\": \"$kind\"}"
done
stats_until garbage_counted_again 3 "f = d['kv_events']['faults']
assert (f['frames'], f['msgpack']) == (2, 2), f"
if [ "$(grep -c 'kv subscriber skips' "$tmp/agent.log")" -eq 5 ]; then
  ok garbage_not_logged_twice
else
  fail garbage_not_logged_twice "$(grep 'skips' "$tmp/agent.log")"
fi

# The engine restarts: numbering from 0, an empty cache.
ctl '{"op": "restart"}'
ctl "{\"op\": \"store\", \"tokens\": [$(seqs 801 804)]}"
workers_until restart_resynced 5 "assert w['gpu_blocks'] == 1, w"
stats_until restart_counted 3 "assert d['kv_events']['restarts'] == 1, d"

# -- a request through the front ----------------------------------------------

ctl '{"op": "clear"}'
ctl "{\"op\": \"store\", \"tokens\": [$A]}"
# The routed request of bid_matches_tiers never came: its award expired
# (--award-ttl-ms 8000: long enough for a loaded machine to call the front
# after a route below).
workers_until ready_for_requests 15 "assert w['gpu_blocks'] == 3 and \
w['queued_blocks'] == 0, w"
stats_until abandoned_award_counted 3 "assert d['worker']['abandoned'] == 1, d"
ctl '{"op": "delay", "first_ms": 3000, "token_ms": 600}'
run route --nats "$url" --block-tokens 4 --tokens "$A16" --output-tokens 4 \
  --json
request=$(python3 -c 'import json, sys; print(json.load(sys.stdin)["request"])' \
  <<<"$out")
# Awarded: one block to compute is queued; nothing in the engine yet.
workers_until queued_at_award 3 "assert w['queued_blocks'] == 1 and \
w['active_blocks'] == 0, w"
python3 - "$front" "$request" >"$tmp/stream.out" 2>&1 <<'EOF' &
import json, sys, urllib.request
front, request = sys.argv[1], sys.argv[2]
body = json.dumps({"model": "standin", "prompt": list(range(1, 17)),
                   "max_tokens": 4, "stream": True}).encode()
req = urllib.request.Request(front + "/v1/completions", data=body,
                             headers={"Content-Type": "application/json",
                                      "X-Kvmesh-Request-Id": request})
with urllib.request.urlopen(req, timeout=30) as r:
    for line in r:
        sys.stdout.write(line.decode())
EOF
client=$!
pids+=("$client")
# Arrived: still queued (no first token), and its blocks held: 16 prompt
# and 4 output tokens.
workers_until occupied_at_arrival 3 "assert w['queued_blocks'] == 1 and \
w['active_blocks'] == 5, w"
workers_until first_token_clears_queue 6 "assert w['queued_blocks'] == 0 and \
w['active_blocks'] == 5, w"
workers_until occupancy_until_end 6 "assert w['active_blocks'] == 0, w"
wait "$client" || true
if [ "$(grep -c '^data: ' "$tmp/stream.out")" -eq 5 ]; then
  ok stream_passed_through
else
  fail stream_passed_through "$(cat "$tmp/stream.out")"
fi

# Without a route: counted in at its arrival, as bypassing the routers.
ctl '{"op": "delay", "first_ms": 1500, "token_ms": 0}'
python3 - "$front" >/dev/null 2>&1 <<'EOF' &
import json, sys, urllib.request
body = json.dumps({"model": "standin", "prompt": "x" * 64,
                   "max_tokens": 2}).encode()
req = urllib.request.Request(sys.argv[1] + "/v1/completions", data=body,
                             headers={"Content-Type": "application/json"})
urllib.request.urlopen(req, timeout=30).read()
EOF
client=$!
pids+=("$client")
workers_until bypass_queued_at_arrival 3 "assert w['queued_blocks'] == 4 and \
w['active_blocks'] == 5, w"
wait "$client" || true
stats_until bypass_counted 5 "w = d['worker']
assert (w['bypassed'], w['approximate'], w['active_blocks']) == (1, 1, 0), w"

# What /kvmesh/stats tells, the agent's /metrics tell as series: the
# bypass, the abandoned award, the KV event gaps, replay, resyncs, restart
# and skipped frames above.
stats
json_stats=$out
http GET "http://127.0.0.1:$agent_metrics/metrics"
if msg=$(python3 -c '
import json, sys
d = json.loads(sys.argv[1])
s = dict(l.rsplit(" ", 1) for l in sys.stdin.read().splitlines()
         if l and not l.startswith("#"))
w, k = d["worker"], d["kv_events"]
assert (w["bypassed"], w["approximate"], w["abandoned"]) == (1, 1, 1), w
assert w["resyncs"] >= 2 and k["restarts"] == 1, (w, k)
one = "{worker=\"0\"}"
want = {"kvmesh_worker_requests_bypassed_total" + one: w["bypassed"],
        "kvmesh_worker_requests_estimated_total" + one: w["approximate"],
        "kvmesh_worker_requests_abandoned_total" + one: w["abandoned"],
        "kvmesh_worker_cache_resets_total" + one: w["resyncs"],
        "kvmesh_worker_kv_batches_total" + one: w["kv_batches"],
        "kvmesh_worker_engine_up" + one: 1,
        "kvmesh_agent_kv_event_messages_total": k["messages"],
        "kvmesh_agent_kv_event_gaps_total": k["gaps"],
        "kvmesh_agent_kv_event_replays_total": k["replays"],
        "kvmesh_agent_kv_event_resyncs_total": k["resyncs"],
        "kvmesh_agent_kv_event_restarts_total": k["restarts"]}
for f, n in k["faults"].items():
    want["kvmesh_agent_kv_event_faults_total{fault=\"%s\"}" % f] = n
for f, n in w["mirror_faults"].items():
    want["kvmesh_worker_kv_mirror_faults_total{fault=\"%s\",worker=\"0\"}"
         % f] = n
for key, v in want.items():
    assert float(s.get(key, "nan")) == v, (key, s.get(key), v)
' "$json_stats" <<<"$out" 2>&1); then
  ok agent_metrics_count_the_front_and_kv_events
else
  fail agent_metrics_count_the_front_and_kv_events "$(tail -n 1 <<<"$msg")"
fi

# -- health ---------------------------------------------------------------------

ctl '{"op": "health", "up": false}'
workers_until unhealthy_when_engine_silent 5 "assert w['state'] == \
'unhealthy', w"
http GET "http://127.0.0.1:$agent_metrics/metrics"
if grep -qx 'kvmesh_worker_engine_up{worker="0"} 0' <<<"$out"; then
  ok engine_up_says_silent
else
  fail engine_up_says_silent "$(grep engine_up <<<"$out")"
fi
run route --nats "$url" --block-tokens 4 --tokens "$A16" --timeout-ms 3000
if [ "$rc" -eq 1 ]; then
  ok unhealthy_gets_no_requests
else
  fail unhealthy_gets_no_requests "exit $rc: $out $err"
fi
ctl '{"op": "health", "up": true}'
workers_until healthy_again 5 "assert w['state'] == 'live', w"

if [ "$fails" -gt 0 ]; then
  echo "--- agent log"
  cat "$tmp/agent.log"
  echo "$fails check(s) failed"
  exit 1
fi
echo "all checks passed"
