#!/bin/bash
# Runs the NATS mesh as an operator would (`kvmesh up`, and one started by
# hand) and checks admin, route, drain, an agent's death, bad flags and Ctrl-C.
# usage: mesh_test.sh KVMESH_BINARY
set -euo pipefail
bin=$1
fails=0
tmp=$(mktemp -d)
pids=()  # every process this script starts, killed at exit

. "$(dirname "$0")/lib.sh"

# jcheck NAME PYTHON: runs PYTHON with `d` the JSON in $out; an exception
# (a failed assert names what is wrong) fails check NAME.
jcheck() {
  local msg
  if msg=$(python3 -c "import json, sys
d = json.loads(sys.stdin.read())
$2" <<<"$out" 2>&1); then
    ok "$1"
  else
    fail "$1" "$(tail -n 1 <<<"$msg"); output: $out $err"
  fi
}

# wait_exit PID SECONDS: waits for our child PID to end, at most SECONDS;
# its exit code in $rc, or rc=timeout.
wait_exit() {
  local end=$((SECONDS + $2))
  while kill -0 "$1" 2>/dev/null && [ "$SECONDS" -lt "$end" ]; do
    # A zombie answers kill -0 too: reaped by wait below.
    if ! ps -o stat= -p "$1" | grep -qv Z; then break; fi
    sleep 0.1
  done
  if ps -o stat= -p "$1" 2>/dev/null | grep -qv Z; then
    rc=timeout
    return
  fi
  rc=0
  wait "$1" || rc=$?
}

prompt=$(seq -s, 1 40)
workers_contract='
want = {"id", "state", "gpu_blocks", "host_blocks", "disk_blocks",
        "queued_blocks", "active_blocks", "capacity_blocks", "speed",
        "endpoint", "engine", "engine_rank", "models", "host_capacity_blocks", "disk_capacity_blocks",
        "awards", "last_price"}'

# -- bad flags and unreachable servers (no mesh needed) -----------------------

# expect_usage NAME FLAG ARGS...: kvmesh ARGS exits 2 naming FLAG.
expect_usage() {
  local name=$1 flag=$2
  shift 2
  run "$@"
  if [ "$rc" -ne 2 ]; then
    fail "$name" "exit $rc, want 2: $err"
  elif ! grep -q -- "$flag" <<<"$err"; then
    fail "$name" "message does not name $flag: $err"
  else
    ok "$name"
  fi
}
nowhere=nats://127.0.0.1:$(free_port)
expect_usage route_without_tokens --tokens \
  route --nats "$nowhere" --block-tokens 16
# A typo's million threads would abort the process when the system runs out.
for cmd in router agent index up bench; do
  expect_usage "${cmd}_threads_bounded" --threads \
    "$cmd" --nats "$nowhere" --threads 1000000
done
expect_usage index_shard_past_last --shard \
  index --nats "$nowhere" --shard 3/2 --db "$tmp/db"
expect_usage agent_vllm_needs_kv_events --kv-events \
  agent --nats "$nowhere" --engine vllm --block-tokens 16
expect_usage agent_vllm_has_no_workers_flag --workers \
  agent --nats "$nowhere" --engine vllm --kv-events tcp://127.0.0.1:5557 \
  --block-tokens 16 --workers 2
expect_usage agent_vllm_needs_block_tokens --block-tokens \
  agent --nats "$nowhere" --engine vllm --kv-events tcp://127.0.0.1:5557
expect_usage agent_vllm_bad_engine_url --engine-url \
  agent --nats "$nowhere" --engine vllm --kv-events tcp://127.0.0.1:5557 \
  --block-tokens 16 --engine-url localhost:8000
expect_usage agent_unknown_engine --engine \
  agent --nats "$nowhere" --engine trt --workers 1
expect_usage route_bad_nats_url --nats \
  route --nats "nats://127.0.0.1:port" --block-tokens 16 --tokens "$prompt"
expect_usage top_bad_interval --interval-ms \
  top --nats "$nowhere" --interval-ms 0
run top --nats "$nowhere" --once --timeout-ms 500
if [ "$rc" -eq 1 ] && grep -qF "$nowhere" <<<"$err"; then
  ok top_nobody_serves_nats
else
  fail top_nobody_serves_nats "exit $rc: $out $err"
fi

start=$SECONDS
run route --nats "$nowhere" --block-tokens 16 --tokens "$prompt" \
  --timeout-ms 3000
if [ "$rc" -ne 1 ]; then
  fail route_nobody_serves_nats "exit $rc, want 1: $err"
elif [ $((SECONDS - start)) -gt 4 ]; then
  fail route_nobody_serves_nats "took $((SECONDS - start)) s"
elif ! grep -q "cannot connect" <<<"$err" || ! grep -qF "$nowhere" <<<"$err"
then
  fail route_nobody_serves_nats "unclear message: $err"
else
  ok route_nobody_serves_nats
fi

# start_up NAME LAST SECS ARGS...: runs `kvmesh up ARGS`, its output in
# $tmp/NAME.out and .err, and returns once router LAST is up (up prints
# "ROLE NAME pid PID ..." per child, nats-server first and the last router
# last); the test ends when it is not within SECS. Sets up (its pid), url
# and port; every child's pid joins pids.
start_up() {
  local name=$1 last=$2 secs=$3
  shift 3
  "$bin" up "$@" >"$tmp/$name.out" 2>"$tmp/$name.err" &
  up=$!
  pids+=("$up")
  local end=$((SECONDS + secs)) pid
  until grep -q "^router $last pid " "$tmp/$name.out"; do
    if [ "$SECONDS" -ge "$end" ] || ! kill -0 "$up" 2>/dev/null; then
      echo "FAIL ${name}_starts: $(cat "$tmp/$name.out" "$tmp/$name.err")"
      exit 1
    fi
    sleep 0.1
  done
  while read -r _ _ _ pid _; do
    pids+=("$pid")
  done < <(grep -E '^[a-z-]+ [^ ]+ pid [0-9]+' "$tmp/$name.out")
  url=$(sed -n 's/^nats-server \(nats:[^ ]*\) pid .*/\1/p' "$tmp/$name.out")
  port=${url##*:}
}

# -- kvmesh up ---------------------------------------------------------------

start_up up router-1 15 --workers 8 --routers 2 --shards 2 --agents 2 \
  --durable --block-tokens 16 --heartbeat-ms 200
mesh_admin() { run admin --nats "$url" "$@"; }
mesh_route() { run route --nats "$url" --block-tokens 16 "$@"; }

# gomaxprocs NAME: the GOMAXPROCS in the environment of the nats-server
# that `kvmesh up` NAME started ("" if none).
gomaxprocs() {
  local pid
  pid=$(sed -n 's/^nats-server [^ ]* pid \([0-9]*\).*/\1/p' "$tmp/$1.out")
  tr '\0' '\n' <"/proc/$pid/environ" | sed -n 's/^GOMAXPROCS=//p'
}

# Its nats-server's Go threads: the cores' share of each of the 6 processes
# and itself, as the processes' own threads.
want=$(($(nproc) / 7))
[ "$want" -ge 1 ] || want=1
got=$(gomaxprocs up)
if [ "$got" = "$want" ]; then
  ok up_nats_server_threads
else
  fail up_nats_server_threads "GOMAXPROCS '$got', want $want"
fi

# (a) every worker, with the contract's fields, live.
if poll 15 admin --nats "$url" workers --json -- \
  'assert sum(w["state"] == "live" for w in d["workers"]) == 8'; then
  ok up_workers_live
else
  fail up_workers_live "no 8 live workers within 15 s: $out $err"
fi
jcheck admin_workers_json "$workers_contract
ws = d[\"workers\"]
assert len(ws) == 8, f\"{len(ws)} entries\"
assert sorted(w[\"id\"] for w in ws) == list(range(8)), [w[\"id\"] for w in ws]
for w in ws:
    assert set(w) == want, f\"fields {sorted(set(w) ^ want)}\"
    assert w[\"state\"] == \"live\", w
    assert w[\"awards\"] == 0 and w[\"last_price\"] is None, w"

# (b) route: a worker, JSON, and the same prompt to the same worker.
mesh_route --tokens "$prompt"
if [ "$rc" -eq 0 ] && grep -Eq -- '-> worker [0-7] ' <<<"$out"; then
  ok route_names_worker
else
  fail route_names_worker "exit $rc: $out $err"
fi
first=$(sed -n 's/.*-> worker \([0-9]*\) .*/\1/p' <<<"$out")
# Hashed with another block size than the mesh's: refused, saying why.
run route --nats "$url" --block-tokens 32 --tokens "$prompt"
if [ "$rc" -ne 0 ] && grep -q "32-token blocks; this mesh uses 16" <<<"$err"
then
  ok route_other_block_size_refused
else
  fail route_other_block_size_refused "exit $rc: $out $err"
fi
# The prompt's blocks reach the index once its worker has prefilled it.
if poll 5 admin --nats "$url" prefix --block-tokens 16 --tokens "$prompt" \
  --json -- "assert any(h['worker'] == ${first:-99} for h in d['holders'])"
then
  ok admin_prefix_shows_worker
else
  fail admin_prefix_shows_worker "worker ${first:-?} not a holder: $out $err"
fi
mesh_route --tokens "$prompt" --json
jcheck route_json "assert {'request', 'worker', 'prices'} <= set(d), d
assert isinstance(d['prices'], list) and d['prices'], d['prices']"
jcheck route_cache_affinity "assert d['worker'] == ${first:-99}, d['worker']"
mesh_route --tokens "$prompt" --json --durable --request-id "durable abc-123"
if [ "$rc" -ne 0 ]; then
  fail route_durable "exit $rc: $err"
else
  jcheck route_durable "assert d['worker'] == ${first:-99}, d['worker']
assert d['client_id'] == 'durable abc-123', d"
fi

# (c) the three decisions so far, as the workers count them (heartbeats
# lag: polled): awards accepted, and the price of the last one.
if poll 5 admin --nats "$url" workers --json -- \
  'assert sum(w["awards"] for w in d["workers"]) == 3'; then
  jcheck admin_workers_awards "
for w in d['workers']:
    if w['awards']:
        assert isinstance(w['last_price'], float) and w['last_price'] >= 0, w
    else:
        assert w['last_price'] is None, w
assert [w['awards'] for w in d['workers'] if w['id'] == ${first:-99}] == [3], d"
else
  fail admin_workers_awards "not 3 awards in all: $out $err"
fi

# (d) routers and shards.
if poll 5 admin --nats "$url" routers --json -- \
  'assert (len(d["routers"]) == 2 and
        sum(r["decisions"] for r in d["routers"]) == 3)'; then
  jcheck admin_routers "assert sorted(r['name'] for r in d['routers']) == \
['router-0', 'router-1'], d
for r in d['routers']:
    assert r['reauctions'] == sum(r['reauctions_by_cause'].values()), r
    assert r['rounds'] >= r['decisions'], r
    assert r['bids'] >= r['decisions'], r
assert sum(r['rounds'] for r in d['routers']) >= 3, d"
else
  fail admin_routers "$out $err"
fi
if poll 5 admin --nats "$url" shards --json -- \
  'assert len(d["shards"]) == 2'; then
  jcheck admin_shards "assert sorted(s['shard'] for s in d['shards']) == \
[0, 1], d"
else
  fail admin_shards "$out $err"
fi

# Shorter than one block: no reuse to price, routed on queue and occupancy,
# and the decision names the request: the mesh's number and the client's
# own id, a string.
mesh_route --tokens 42 --request-id abc-123 --json
jcheck route_one_token "assert d['client_id'] == 'abc-123', d
assert isinstance(d['request'], int) and 0 <= d['worker'] < 8, d"
mesh_route --tokens 42 --request-id abc-123
if [ "$rc" -eq 0 ] &&
  grep -Eq -- '^request [0-9]+ \(client id "abc-123"\) -> worker' <<<"$out"
then
  ok route_prints_request_id
else
  fail route_prints_request_id "exit $rc: $out $err"
fi
run route --nats "$url" --block-tokens 16 --text "hello world"
if [ "$rc" -eq 0 ] && grep -Eq -- '-> worker [0-7] ' <<<"$out"; then
  ok route_short_text
else
  fail route_short_text "exit $rc: $out $err"
fi

# (k) kvmesh top: one frame, every worker and router on a line of its own,
# with requests routed meanwhile (other prompts, so that the awards spread):
# awards and decisions per second measured over the interval, the awards
# so far and the last prices, the bids per round.
(
  i=0
  while [ ! -e "$tmp/top.done" ]; do
    "$bin" route --nats "$url" --block-tokens 16 \
      --tokens "$(seq -s, $((i * 100 + 5000)) $((i * 100 + 5039)))" \
      >/dev/null 2>&1 || true
    i=$((i + 1))
  done
) &
routing=$!
pids+=("$routing")
run top --nats "$url" --once --interval-ms 1500
touch "$tmp/top.done"
wait "$routing" || true
# Cells by the header's names (no cell holds a space).
cat >"$tmp/top_check.py" <<'PY'
import sys
tables, header = {}, None
for line in sys.stdin.read().splitlines():
    w = line.split()
    if not w:
        header = None
    elif w[0] in ("worker", "router"):
        header = w
        tables[w[0]] = []
    elif header:
        assert len(w) == len(header), (header, w)
        tables[header[0]].append(dict(zip(header, w)))
ws, rs = tables.get("worker", []), tables.get("router", [])
assert sorted(int(w["worker"]) for w in ws) == list(range(8)), ws
for w in ws:
    assert w["state"] == "live" and w["agent"].startswith("agent-"), w
    float(w["awards/s"]), float(w["queued"])  # measured: not "-"
    assert w["occupancy"].endswith("%") and w["gpu_fill"].endswith("%"), w
    if int(w["awards"]):
        assert float(w["last_price"]) >= 0, w
    else:
        assert w["last_price"] == "-", w
assert sum(int(w["awards"]) for w in ws) > 3, "no awards since (c)"
assert sum(float(w["awards/s"]) for w in ws) > 0, "no awards/s"
assert sorted(r["router"] for r in rs) == ["router-0", "router-1"], rs
for r in rs:
    float(r["decisions/s"]), float(r["auction_p99_us"])
assert sum(float(r["decisions/s"]) for r in rs) > 0, "no decisions/s"
assert all(float(r["bids/round"]) >= 1 for r in rs if r["decisions"] != "0"), rs
PY
if [ "$rc" -ne 0 ]; then
  fail top_once "exit $rc: $out $err"
elif ! msg=$(python3 "$tmp/top_check.py" <<<"$out" 2>&1); then
  fail top_once "$(tail -n 1 <<<"$msg"): $out"
elif ! grep -q "^8 workers (8 live" <<<"$out"; then
  fail top_once "no summary: $out"
else
  ok top_once
fi

# (e) weights: set on every router, so any of them answers the new value.
mesh_admin weights set --beta 0.05
if [ "$rc" -ne 0 ]; then fail admin_weights_set "exit $rc: $err"; fi
for i in 1 2 3 4 5 6; do
  mesh_admin weights --json
  if ! jtest 'assert d["weights"]["beta"] == 0.05'; then break; fi
done
jcheck admin_weights_beta "assert d['weights']['beta'] == 0.05, d['weights']"

# (f) drain and undrain.
mesh_admin drain 3
if [ "$rc" -ne 0 ]; then fail admin_drain "exit $rc: $err"; fi
if poll 5 admin --nats "$url" workers --json -- \
  'assert [w["state"] for w in d["workers"] if w["id"] == 3] == ["draining"]'
then
  ok admin_drain
else
  fail admin_drain "worker 3 not draining: $out $err"
fi
mesh_admin undrain 3
if [ "$rc" -ne 0 ]; then fail admin_undrain "exit $rc: $err"; fi
if poll 5 admin --nats "$url" workers --json -- \
  'assert [w["state"] for w in d["workers"] if w["id"] == 3] == ["live"]'
then
  ok admin_undrain
else
  fail admin_undrain "worker 3 not live: $out $err"
fi
mesh_admin drain 99
if [ "$rc" -ne 0 ] && grep -q 99 <<<"$err"; then
  ok admin_drain_unknown
else
  fail admin_drain_unknown "exit $rc: $out $err"
fi

# (l) durable load with many publishes on their way at once: each request
# stored once and decided once.
run load --nats "$url" --durable --publish-window 32 --rate 200 \
  --duration-s 1 --drain-s 2 --block-tokens 16 --json
jcheck load_durable_window "assert d['sent'] >= 150, d
assert d['decided'] == d['sent'] and d['publish_errors'] == 0, d
assert d['lost'] == 0 and d['duplicates'] == 0, d"

# (j) Ctrl-C: up stops its children and nats-server, and exits 0.
kill -INT "$up"
wait_exit "$up" 20
if [ "$rc" != 0 ]; then
  fail up_sigint_exit "exit $rc, want 0: $(tail -n 5 "$tmp/up.err")"
else
  ok up_sigint_exit
fi
left=$(pgrep -f -- "(127\.0\.0\.1:|-p )$port( |$)" || true)
if [ -n "$left" ]; then
  fail up_sigint_stops_all "left: $(ps -o pid=,args= -p "${left//$'\n'/,}")"
else
  ok up_sigint_stops_all
fi

# -- a mesh started by hand: an agent's death --------------------------------
# (up stops the whole mesh when one of its children dies.)

start_nats
common=(--nats "$url" --heartbeat-ms 200)
"$bin" index "${common[@]}" --shard 0/1 --db "$tmp/db" 2>>"$tmp/mesh.err" &
pids+=($!)
"$bin" agent "${common[@]}" --engine sim --workers 4 --worker-id 0 \
  --block-tokens 16 2>>"$tmp/mesh.err" &
doomed=$!
pids+=("$doomed")
"$bin" agent "${common[@]}" --engine sim --workers 4 --worker-id 4 \
  --block-tokens 16 2>>"$tmp/mesh.err" &
pids+=($!)
for r in 0 1; do
  "$bin" router "${common[@]}" --name "router-$r" --block-tokens 16 \
    2>>"$tmp/mesh.err" &
  pids+=($!)
done
if ! poll 15 admin --nats "$url" workers --json -- \
  'assert sum(w["state"] == "live" for w in d["workers"]) == 8'; then
  fail mesh_by_hand_starts "$out $err $(cat "$tmp/mesh.err")"
fi

# (g) kill -9 an agent: its workers are gone, routing goes on without them.
kill -9 "$doomed"
wait "$doomed" 2>/dev/null || true
if poll 5 admin --nats "$url" workers --json -- \
  'st = {w["id"]: w["state"] for w in d["workers"]}
assert all(st.get(i) == "gone" for i in range(4)), st
assert all(st.get(i) == "live" for i in range(4, 8)), st'; then
  ok agent_death_workers_gone
else
  fail agent_death_workers_gone "within 5 s: $out $err"
fi
bad=""
for i in $(seq 1 10); do
  mesh_route --tokens "$(seq -s, $((i * 1000)) $((i * 1000 + 39)))" --json
  if [ "$rc" -ne 0 ] || ! jtest 'assert 4 <= d["worker"] <= 7'; then
    bad+=" [route $i: exit $rc: $out $err]"
  fi
done
if [ -z "$bad" ]; then
  ok agent_death_routing_goes_on
else
  fail agent_death_routing_goes_on "$bad"
fi

# (i) a NATS server without routers under this prefix.
run route --nats "$url" --prefix nobody --block-tokens 16 --tokens "$prompt"
if [ "$rc" -eq 1 ] && grep -q "no router serves nobody.route" <<<"$err"; then
  ok route_no_router
else
  fail route_no_router "exit $rc: $err"
fi

# -- up when a child dies: it stops the rest and says which ----------------

export GOMAXPROCS=3  # the user's own choice for nats-server stands
start_up up2 router-0 15 --workers 2 --agents 2 --heartbeat-ms 200
unset GOMAXPROCS
got=$(gomaxprocs up2)
if [ "$got" = 3 ]; then
  ok up_nats_server_threads_given
else
  fail up_nats_server_threads_given "GOMAXPROCS '$got', want 3"
fi
doomed=$(sed -n 's/^agent agent-1 pid \([0-9]*\).*/\1/p' "$tmp/up2.out")
kill -9 "$doomed"
wait_exit "$up" 20
if [ "$rc" != 1 ]; then
  fail up_child_death "exit $rc, want 1: $(cat "$tmp/up2.err")"
elif ! grep -q "agent agent-1 (pid $doomed) killed by signal 9" "$tmp/up2.err"
then
  fail up_child_death "does not name the dead agent: $(cat "$tmp/up2.err")"
else
  ok up_child_death
fi
left=$(pgrep -f -- "(127\.0\.0\.1:|-p )$port( |$)" || true)
if [ -n "$left" ]; then
  fail up_child_death_stops_all \
    "left: $(ps -o pid=,args= -p "${left//$'\n'/,}")"
else
  ok up_child_death_stops_all
fi

# -- a fleet whose listing outgrows one NATS message (1 MiB: about 4,700
# workers): kvmesh admin reads it in pages --------------------------------

start_up up3 router-0 30 --workers 5000 --agents 2 --gpu-blocks 16 \
  --host-blocks 0 --disk-blocks 0
if poll 60 admin --nats "$url" workers --json -- \
  'ids = [w["id"] for w in d["workers"]]
assert ids == list(range(5000)), len(ids)
assert all(w["state"] == "live" for w in d["workers"])'; then
  ok admin_lists_5000_workers
else
  fail admin_lists_5000_workers "exit $rc: ${err:0:300} ${out:0:300}"
fi
kill -INT "$up"
wait_exit "$up" 30
[ "$rc" = 0 ] || fail large_up_stops "exit $rc: $(tail -n 3 "$tmp/up3.err")"

[ "$fails" -eq 0 ] || { echo "$fails mesh checks failed"; exit 1; }
