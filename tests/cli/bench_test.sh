#!/bin/bash
# Runs `kvmesh bench` as a user would: a throughput run and a short trace
# replay through a mesh it starts itself, checking what its JSON reports
# (every request decided once, the routing overhead, each process's CPU, the
# raw NATS baseline at the run's fan-out, the config including --threads),
# and that bad flags are refused with the flag named.
# usage: bench_test.sh KVMESH_BINARY TEST_DATA_DIR
set -euo pipefail
bin=$1
data=$2
fails=0
tmp=$(mktemp -d)
pids=()  # bench starts and stops its own mesh; nothing here to stop

. "$(dirname "$0")/lib.sh"

# -- throughput: 300 requests, one CAF thread per process ---------------------
run bench --mode throughput --workers 4 --agents 2 --routers 2 --shards 1 \
  --requests 300 --outstanding 32 --threads 1 --baseline-samples 200 \
  --json "$tmp/t.json"
if [ "$rc" -ne 0 ]; then
  fail throughput_runs "exit $rc: $(tail -n 5 <<<"$err")"
else
  ok throughput_runs
fi
out=$(cat "$tmp/t.json" 2>/dev/null || echo '{}')
if jtest 't = d["throughput"]
assert t["requests"] == 300 and t["sent"] == 300
assert t["decided"] == 300 and t["errors"] == 0 and t["timed_out"] == 0
assert t["decisions_per_s"] > 0'; then
  ok throughput_every_request_decided
else
  fail throughput_every_request_decided "$(head -c 600 <<<"$out")"
fi
if jtest 'o = d["overhead"]
assert o["decisions"] == 300
assert len(o["routers"]) == 2
assert sum(r["decisions"] for r in o["routers"]) == 300
assert 0 < o["auction_p50_us"] <= o["auction_p99_us"]
assert o["nats_msgs_per_decision"] > 0
# Re-auctions by cause sum to the re-auctions, per router and in all.
for x in o["routers"] + [o]:
    c = x["reauctions_by_cause"]
    assert sorted(c) == sorted(["refused", "unanswered", "no_bids",
                                "saturated", "no_live_worker"]), c
    assert sum(c.values()) == x["reauctions"], x'; then
  ok throughput_overhead
else
  fail throughput_overhead "$(python3 -c 'import json,sys
print(json.load(sys.stdin).get("overhead"))' <<<"$out" 2>&1 | head -c 600)"
fi
if jtest 'names = sorted(c["process"] for c in d["cpu"])
assert names == sorted(["agent-0", "agent-2", "router-0", "router-1",
                        "shard-0", "nats-server", "bench client"]), names
assert all(c["cpu_s"] >= 0 for c in d["cpu"])'; then
  ok throughput_cpu_per_process
else
  fail throughput_cpu_per_process "$(python3 -c 'import json,sys
print(json.load(sys.stdin).get("cpu"))' <<<"$out" 2>&1 | head -c 600)"
fi
if jtest 'b = d["baseline"]
assert b["fanout"] == 4
for k in ("request_reply", "scatter_gather"):
    assert b[k]["samples"] == 200 and 0 < b[k]["p50_us"] <= b[k]["p99_us"]
c = d["config"]
assert c["threads"] == 1 and c["workers"] == 4 and c["routers"] == 2
# Decisions back to back leave no idle time: no paced baseline; and no
# trace, so no rounds at its arrivals.
assert b["paced"] is None
assert b["scatter_gather_during_run"] is None'; then
  ok throughput_baseline_and_config
else
  fail throughput_baseline_and_config "$(python3 -c 'import json,sys
d = json.load(sys.stdin); print(d.get("baseline"), d.get("config"))' \
    <<<"$out" 2>&1 | head -c 600)"
fi

# -- trace: the same table as kvmesh sim, every request routed ---------------
run bench --trace "$data/conversation_head.jsonl" --limit 60 --workers 4 \
  --routers 1 --shards 1 --speedup 20 --baseline-samples 100 \
  --json "$tmp/r.json"
if [ "$rc" -eq 0 ] && grep -q '^kvmesh ' <<<"$out" &&
  grep -q 'auction p99 / scatter-gather p99.*during the run' <<<"$out"; then
  ok trace_table
else
  fail trace_table "exit $rc: $(tail -n 5 <<<"$err") $(head -c 400 <<<"$out")"
fi
out=$(cat "$tmp/r.json" 2>/dev/null || echo '{}')
if jtest 'r = [x for x in d["results"] if x["policy"] == "kvmesh"][0]
assert r["requests"] == 60, r
assert d["overhead"]["decisions"] == 60
assert d["config"]["threads"] == 0
# A trace leaves idle time between decisions: the baseline ran paced too.
p = d["baseline"]["paced"]
assert 0 < p["rate"] < d["overhead"]["decisions_per_s"] * 1.01
for k in ("request_reply", "scatter_gather"):
    assert 0 < p[k]["p50_us"] <= p[k]["p99_us"] and p[k]["samples"] == 100
# The imbalance is measured from the polled queues: at least 1 by its
# definition, or null when the run was too short to poll twice.
assert r["imbalance"] is None or r["imbalance"] >= 1, r["imbalance"]
# And a round at each arrival of the trace while the mesh routed it.
s = d["baseline"]["scatter_gather_during_run"]
assert s["samples"] == 60 and 0 < s["p50_us"] <= s["p99_us"], s'; then
  ok trace_every_request_routed
else
  fail trace_every_request_routed "$(head -c 600 <<<"$out")"
fi

# -- bad flags: refused before anything starts, the flag named ---------------
run bench --mode throughput --threads many
if [ "$rc" -ne 0 ] && grep -q -- '--threads' <<<"$err"; then
  ok bad_threads_refused
else
  fail bad_threads_refused "exit $rc: $err"
fi
run bench --mode sideways
if [ "$rc" -ne 0 ] && grep -q -- '--mode' <<<"$err"; then
  ok bad_mode_refused
else
  fail bad_mode_refused "exit $rc: $err"
fi

if [ "$fails" -gt 0 ]; then
  echo "$fails failed"
  exit 1
fi
echo "all passed"
