#!/bin/bash
# The bounded fault run (scripts/chaos --short) on the real binary: every
# fault under load, without and with --durable; scripts/chaos itself fails
# on a must-hold number (duplicates, runs twice, durable losses, a dead
# worker in the auctions after 3 heartbeats, routing not resuming). This
# also checks that the run covered what it must and printed its table.
# usage: chaos_test.sh KVMESH_BINARY SOURCE_ROOT
set -uo pipefail
bin=$1
root=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
rc=0
"$root/scripts/chaos" --kvmesh "$bin" --short --json "$tmp/chaos.json" \
  >"$tmp/out" 2>"$tmp/err" || rc=$?
cat "$tmp/out"
if [ "$rc" -ne 0 ]; then
  echo "FAIL scripts/chaos --short exited $rc"
  tail -n 20 "$tmp/err"
  exit 1
fi
python3 - "$tmp/chaos.json" <<'PY' || exit 1
import json, sys
d = json.load(open(sys.argv[1]))
rows = d["rows"]
got = {(r["mode"], r["fault"]) for r in rows}
want = {(m, f) for m in ("core", "durable")
        for f in ("agent", "router", "shard", "nats", "cluster-node")}
want.add(("durable", "answer-then-die"))
assert want <= got, f"faults not run: {sorted(want - got)}"
assert not d["failures"], d["failures"]
for r in rows:
    assert r["sent"] > 0 and r["decided"] > 0, r
    assert r["duplicates"] == 0 and r["double_runs"] == 0, r
    # Across a lone nats-server's restart too: answers missed while the
    # client reconnected are read from the records.
    if r["mode"] == "durable":
        assert r["lost"] == 0, r
print(f"ok   chaos: {len(rows)} faults in {d['seconds']} s")
PY
