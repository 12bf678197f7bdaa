#!/bin/bash
# Runs an index shard, a node agent, a router and a gateway with
# --metrics-port on a nats-server of its own (and, in a mesh of its own, an
# agent beside a simulated GPU served as vLLM serves one), routes requests with `kvmesh
# route` and through the gateway, and checks what each /metrics serves
# (tests/cli/metrics_check.py), the endpoint's refusals, the probes, the
# flags' errors and a clean stop.
# usage: metrics_test.sh KVMESH_BINARY SOURCE_ROOT
set -euo pipefail
bin=$1
root=$2
fails=0
tmp=$(mktemp -d)
pids=()  # every process this script starts, stopped at exit

. "$(dirname "$0")/lib.sh"

# wait_metrics PORT NAME: until PORT answers /metrics (10 s).
wait_metrics() {
  local end=$((SECONDS + 10)) r
  while r=$(fetch "http://127.0.0.1:$1/metrics") && [ "${r:0:3}" != 200 ]; do
    if [ "$SECONDS" -ge "$end" ]; then
      fail "$2_serves_metrics" "port $1: $(cat "$tmp/$2.err")"
      return 1
    fi
    sleep 0.1
  done
}

start_nats

# -- the flags ----------------------------------------------------------------

rc=0
"$bin" router --nats "$url" --metrics-port 70000 2>"$tmp/err" || rc=$?
if [ "$rc" -eq 2 ] && grep -q -- --metrics-port "$tmp/err"; then
  ok metrics_port_out_of_range
else
  fail metrics_port_out_of_range "exit $rc: $(cat "$tmp/err")"
fi
rc=0
"$bin" index --nats "$url" --shard 0/1 --db "$tmp/nodb" --metrics-port 9 \
  --metrics-address 'no such host!' 2>"$tmp/err" || rc=$?
if [ "$rc" -eq 2 ] && grep -q "no such host!" "$tmp/err"; then
  ok metrics_address_bad
else
  fail metrics_address_bad "exit $rc: $(cat "$tmp/err")"
fi

# -- a mesh with metrics --------------------------------------------------------

mi=$(free_port)
ma=$(free_port)
mr=$(free_port)
mg=$(free_port)
api=$(free_port)
common=(--nats "$url" --heartbeat-ms 200 --metrics-address 127.0.0.1)
"$bin" index "${common[@]}" --shard 0/1 --db "$tmp/db" --metrics-port "$mi" \
  2>"$tmp/index.err" &
index=$!
pids+=("$index")
# Serving model m: the gateway's pool (simulated GPUs have no front, so a
# request the gateway routes fails at the proxy, re-routed, then 502).
"$bin" agent "${common[@]}" --engine sim --workers 3 --worker-id 0 \
  --block-tokens 16 --host-blocks 256 --time-scale 20 --metrics-port "$ma" \
  --model m 2>"$tmp/agent.err" &
agent=$!
pids+=("$agent")
"$bin" router "${common[@]}" --name router-m --block-tokens 16 \
  --metrics-port "$mr" 2>"$tmp/router.err" &
router=$!
pids+=("$router")
"$bin" gateway "${common[@]}" --name gateway-m --block-tokens 16 \
  --listen "127.0.0.1:$api" --metrics-port "$mg" 2>"$tmp/gateway.err" &
gateway=$!
pids+=("$gateway")
# An agent beside a real engine's API (a simulated GPU served as vLLM
# serves one), in a mesh of its own (--prefix) so that it takes none of
# the requests above: the series only such an agent has.
kv=$(free_port)
"$bin" engine --serve 127.0.0.1:0 --model m-real --kv-events "tcp://127.0.0.1:$kv" \
  >"$tmp/engine.out" 2>"$tmp/engine.err" &
pids+=($!)
end=$((SECONDS + 10))
until grep -q "^ready http_port=" "$tmp/engine.out"; do
  if [ "$SECONDS" -ge "$end" ]; then
    fail engine_serves "$(cat "$tmp/engine.err")"
    exit 1
  fi
  sleep 0.1
done
engine_port=$(sed -n 's/^ready http_port=//p' "$tmp/engine.out")
me=$(free_port)
front=$(free_port)
"$bin" agent "${common[@]}" --prefix vllm-side --engine vllm \
  --engine-url "http://127.0.0.1:$engine_port" \
  --kv-events "tcp://127.0.0.1:$kv" --block-tokens 16 --worker-id 10 \
  --front-host 127.0.0.1 --front-port "$front" --metrics-ms 200 \
  --metrics-port "$me" 2>"$tmp/engine-agent.err" &
engine_agent=$!
pids+=("$engine_agent")
wait_metrics "$mi" index || exit 1
wait_metrics "$ma" agent || exit 1
wait_metrics "$mr" router || exit 1
wait_metrics "$mg" gateway || exit 1
wait_metrics "$me" engine-agent || exit 1
# A request sent around the routers, straight to the worker's front.
r=$(fetch "http://127.0.0.1:$front/v1/completions" \
  '{"model":"m-real","prompt":"around the routers","max_tokens":2}')
if [ "${r:0:3}" = 200 ]; then
  ok front_serves_a_bypass
else
  fail front_serves_a_bypass "$r: $(cat "$tmp/engine-agent.err")"
fi

# A second process on a port in use stops at once, naming it.
rc=0
timeout 10 "$bin" router --nats "$url" --name router-x --metrics-port "$mr" \
  --metrics-address 127.0.0.1 2>"$tmp/err" || rc=$?
if [ "$rc" -eq 1 ] && grep -q "127.0.0.1:$mr" "$tmp/err"; then
  ok metrics_port_in_use
else
  fail metrics_port_in_use "exit $rc: $(cat "$tmp/err")"
fi

# Routing starts once the router hears the 3 workers.
end=$((SECONDS + 15))
until "$bin" admin --nats "$url" workers --json 2>/dev/null | python3 -c '
import json, sys
d = json.load(sys.stdin)
assert sum(w["state"] == "live" for w in d["workers"]) == 3' 2>/dev/null; do
  if [ "$SECONDS" -ge "$end" ]; then
    fail mesh_starts "$(cat "$tmp"/*.err)"
    exit 1
  fi
  sleep 0.2
done
routed=0
for i in $(seq 1 6); do
  # Two prompt families: the second of each finds its prefix cached.
  if "$bin" route --nats "$url" --block-tokens 16 --json \
    --tokens "$(seq -s, $(((i % 2) * 1000)) $(((i % 2) * 1000 + 47)))" \
    >/dev/null 2>>"$tmp/route.err"; then
    routed=$((routed + 1))
  fi
done
if [ "$routed" -eq 6 ]; then
  ok routed
else
  fail routed "$routed of 6: $(cat "$tmp/route.err")"
fi

# Hashed in other blocks than the mesh's: answered without a worker, and
# counted as such (not as a decision).
rc=0
"$bin" route --nats "$url" --block-tokens 32 --tokens "$(seq -s, 1 64)" \
  >/dev/null 2>&1 || rc=$?
r=$(fetch "http://127.0.0.1:$mr/metrics")
if [ "$rc" -eq 1 ] &&
  grep -q '^kvmesh_router_failures_total{reason="other"} 1$' <<<"$r"; then
  ok failure_counted
else
  fail failure_counted "route exit $rc; $(grep failures_total <<<"$r")"
fi

# Through the gateway, once it hears the workers: its listing, a body that
# is not JSON, a model nobody serves, and a request it routes (token ids:
# no tokenizing) that no worker's front can take.
end=$((SECONDS + 10))
until r=$(fetch "http://127.0.0.1:$api/health") && [ "${r:0:3}" = 200 ]; do
  if [ "$SECONDS" -ge "$end" ]; then
    fail gateway_hears_workers "$r: $(cat "$tmp/gateway.err")"
    exit 1
  fi
  sleep 0.2
done
r=$(fetch "http://127.0.0.1:$api/v1/models")
if [ "${r:0:3}" = 200 ] && grep -q '"id":"m"' <<<"$r"; then
  ok gateway_lists_models
else
  fail gateway_lists_models "$r"
fi
r=$(fetch "http://127.0.0.1:$api/v1/completions" 'not json')
r2=$(fetch "http://127.0.0.1:$api/v1/completions" '{"model":"x","prompt":"hi"}')
if [ "${r:0:3}" = 400 ] && [ "${r2:0:3}" = 404 ]; then
  ok gateway_refuses_bad_requests
else
  fail gateway_refuses_bad_requests "$r | $r2"
fi
r=$(fetch "http://127.0.0.1:$api/v1/completions" \
  "{\"model\":\"m\",\"max_tokens\":1,\"prompt\":[$(seq -s, 1 48)]}")
if [ "${r:0:3}" = 502 ]; then
  ok gateway_routes
else
  fail gateway_routes "$r: $(cat "$tmp/gateway.err")"
fi

if out=$(python3 "$root/tests/cli/metrics_check.py" "$root" "$routed" 0,1,2 \
  "router=http://127.0.0.1:$mr/metrics" "agent=http://127.0.0.1:$ma/metrics" \
  "index=http://127.0.0.1:$mi/metrics" \
  "gateway=http://127.0.0.1:$mg/metrics" \
  "agent:vllm=http://127.0.0.1:$me/metrics" 2>&1); then
  ok "series ($out)"
else
  fail series "$out"
fi

# Prometheus' own linter (promtool, Debian's prometheus package) on each
# process's page.
for p in "index:$mi" "agent:$ma" "router:$mr" "gateway:$mg" \
  "engine-agent:$me"; do
  r=$(fetch "http://127.0.0.1:${p##*:}/metrics")
  if lint=$(tail -c +5 <<<"$r" | promtool check metrics 2>&1); then
    ok "promtool_${p%%:*}"
  else
    fail "promtool_${p%%:*}" "$lint"
  fi
done

# Any path but /metrics and the probes is refused, and the refusal counted.
r=$(fetch "http://127.0.0.1:$ma/")
if [ "${r:0:3}" = 404 ]; then ok other_path_404; else fail other_path_404 "$r"; fi
r=$(fetch "http://127.0.0.1:$ma/metrics")
if grep -q '^kvmesh_metrics_requests_total{code="404"} 1$' <<<"$r"; then
  ok refusals_counted
else
  fail refusals_counted "$(grep metrics_requests <<<"$r")"
fi

# -- probes --------------------------------------------------------------------

# wait_probe PATH CODE TEXT SECONDS: until every process answers PATH with
# CODE and a body holding TEXT; fails the check probe_PATH_CODE otherwise.
wait_probe() {
  local end=$((SECONDS + $4)) left r p
  while true; do
    left=""
    for p in "index:$mi" "agent:$ma" "router:$mr" "gateway:$mg" \
      "engine-agent:$me"; do
      r=$(fetch "http://127.0.0.1:${p##*:}$1")
      if [ "${r:0:3}" != "$2" ] || ! grep -qF -- "$3" <<<"$r"; then
        left+=" ${p%%:*}: $r;"
      fi
    done
    [ -n "$left" ] || { ok "probe${1//\//_}_$2"; return 0; }
    if [ "$SECONDS" -ge "$end" ]; then
      fail "probe${1//\//_}_$2" "$left"
      return 1
    fi
    sleep 0.2
  done
}

wait_probe /healthz 200 ok 5
wait_probe /readyz 200 ready 5
# nats-server stops: each process stays alive but is not ready, and says
# why; back on the same port, each is ready again (the router and the
# gateway once they hear a live worker).
kill "${pids[0]}"
wait "${pids[0]}" 2>/dev/null || true
wait_probe /readyz 503 "not connected to NATS" 15
wait_probe /healthz 200 ok 5
nats-server -a 127.0.0.1 -p "$port" -l "$tmp/nats2.log" &
pids+=($!)
wait_probe /readyz 200 ready 30

# SIGTERM: each stops its endpoint with the rest and exits 0.
for p in "$gateway" "$router" "$engine_agent" "$agent" "$index"; do
  kill -TERM "$p"
  rc=0
  wait "$p" || rc=$?
  if [ "$rc" -ne 0 ]; then
    fail clean_stop "pid $p exit $rc: $(cat "$tmp"/*.err)"
  fi
done
[ "$fails" -gt 0 ] || ok clean_stop

if [ "$fails" -gt 0 ]; then
  echo "$fails failed"
  exit 1
fi
echo "all passed"
