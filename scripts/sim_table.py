#!/usr/bin/env python3
"""The routing-quality table of docs/benchmarks.md from scripts/bench-sim's JSON.

usage: sim_table.py DIR   (DIR holds one NAME.json per scenario)

One row per scenario: round_robin's mean TTFT, kvmesh's mean and p99 against
the best other policy on each statistic (the oracle and round_robin are not
peers: one is a bound, the other the load-only baseline), kvmesh's hit ratio
beside `prefix`'s, and the oracle's bound. Exits 1 naming a file that is
missing or holds no kvmesh result, 2 on a bad invocation.
"""

import json
import os
import sys

# bench-sim's scenario names, in the table's order, with how a reader says them.
TRACES = {"conversation": "conversation", "synthetic": "synthetic"}
SHAPES = [("w8_r1", "8 workers, 1 router"),
          ("w8_r4", "8 workers, 4 routers"),
          ("w16_r1", "16 workers, 1 router"),
          ("w16_r4", "16 workers, 4 routers"),
          ("w16_r4_delay50", "16 workers, 4 routers, state 50 ms late"),
          ("w16_half_speed", "16 workers (half at speed 0.5)")]
NOT_PEERS = {"kvmesh", "round_robin", "oracle"}


def row(label, data):
    by = {r["policy"]: r for r in data["results"]}
    if "kvmesh" not in by:
        raise ValueError("no kvmesh result")
    km = by["kvmesh"]
    peers = [r for p, r in by.items() if p not in NOT_PEERS]

    def best(stat):
        r = min(peers, key=lambda r: r["ttft_ms"][stat])
        return r["policy"], r["ttft_ms"][stat]

    def vs(mine, theirs):
        return f"{100.0 * (mine - theirs) / theirs:+.1f}%".replace("+-", "-")

    bm, bm_v = best("mean")
    bp, bp_v = best("p99")
    rr = by.get("round_robin", {}).get("ttft_ms", {}).get("mean", float("nan"))
    prefix = by.get("prefix", {}).get("hit_ratio", {}).get("total", float("nan"))
    o = data["oracle"]["ttft_ms"]
    cells = [label, f"{rr:.0f}", f"{km['ttft_ms']['mean']:.0f}",
             f"{bm} {bm_v:.0f}", vs(km["ttft_ms"]["mean"], bm_v),
             f"{km['ttft_ms']['p99']:.0f}", f"{bp} {bp_v:.0f}",
             vs(km["ttft_ms"]["p99"], bp_v),
             f"{100 * km['hit_ratio']['total']:.1f} / {100 * prefix:.1f}",
             f"{o['mean']:.0f} / {o['p99']:.0f}"]
    return "| " + " | ".join(cells) + " |"


def main(argv):
    if len(argv) != 2 or not os.path.isdir(argv[1]):
        print(__doc__, file=sys.stderr)
        return 2
    print("| scenario | round_robin mean | kvmesh mean | best peer mean | vs best"
          " | kvmesh p99 | best peer p99 | vs best | hit % kvmesh / prefix"
          " | oracle mean / p99 |")
    print("|---|---:|---:|---|---:|---:|---|---:|---|---|")
    for trace, trace_label in TRACES.items():
        for shape, shape_label in SHAPES:
            path = os.path.join(argv[1], f"{trace}_{shape}.json")
            try:
                with open(path) as f:
                    print(row(f"{trace_label}, {shape_label}", json.load(f)))
            except (OSError, ValueError, KeyError) as e:
                print(f"sim_table.py: {path}: {e}", file=sys.stderr)
                return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
