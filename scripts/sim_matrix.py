#!/usr/bin/env python3
"""The robustness matrix of docs/benchmarks.md: every policy in `kvmesh sim`
over fleets, cache sizes, tiers, speeds, loads, routers and state delays.

usage: sim_matrix.py KVMESH_BINARY TRACE_DIR OUT_DIR
       sim_matrix.py --replay OUT_DIR KVMESH_BINARY [KVMESH_SIM_FLAG...]

Each scenario's load is calibrated, not chosen: "heavy" is the arrival
speed-up at which round_robin's mean TTFT is 5x the oracle's, found by
bisection on round_robin alone, so that a load means the same queueing on
a small fleet and a large one, a small cache and a large one; "light" is a
quarter of it. Writes OUT_DIR/NAME.json and NAME.txt per scenario, and prints
the matrix as Markdown: each scenario's oracle bound, kvmesh's and the
best peer's mean and p99 TTFT, and kvmesh's excess over the oracle divided
by the best peer's (below 1: kvmesh closer to the bound; 1% of the bound
is added to both, so that a peer at the bound does not make it infinite),
then their
geometric means and every scenario where kvmesh is not the lowest.
Deterministic (seed 1). Exits 1 when a run fails, 2 on a bad invocation.

--replay runs kvmesh alone again on every scenario a matrix wrote to
OUT_DIR, at the same load and with the given `kvmesh sim` flags (price
weights, say), and prints the matrix against the peers' recorded results:
seconds instead of the matrix's minutes, for trying a change of kvmesh's
price on every scenario at once. Nothing in OUT_DIR is written.
"""

import json
import math
import os
import shutil
import subprocess
import sys
import tempfile

SEED = "1"
# Not peers: the load-only baseline and the bound.
NOT_PEERS = {"kvmesh", "round_robin", "oracle"}
# GPU / host / disk blocks of 512 tokens per worker.
CACHES = {"gpu256": (256, 0, 0),          # a small GPU, no other tier
          "tiered": (1024, 4096, 16384),  # an 80 GB GPU with host and disk
          "gpu4096": (4096, 0, 0)}        # a large GPU, no other tier
HEAVY = 5.0  # round_robin's mean TTFT over the oracle's at heavy load
LOADS = {"light": 0.25, "heavy": 1.0}  # arrival speed-up, heavy's = 1


def mixed(n):
    """n speeds spread evenly from 0.5 to 1.0 (a fleet of mixed GPUs)."""
    return ",".join(f"{0.5 + 0.5 * i / max(1, n - 1):.4g}" for i in range(n))


def sim(binary, trace, workers, cache, speedup, policy, json_path,
        routers=1, delay=0, speeds=None):
    g, h, d = CACHES[cache]
    cmd = [binary, "sim", "--trace", trace, "--workers", str(workers),
           "--gpu-blocks", str(g), "--host-blocks", str(h),
           "--disk-blocks", str(d), "--speedup", f"{speedup:.6g}",
           "--routers", str(routers), "--state-delay-ms", str(delay),
           "--policy", policy, "--seed", SEED, "--quiet", "--json", json_path]
    if speeds:
        cmd += ["--worker-speeds", speeds]
    run = subprocess.run(cmd, capture_output=True, text=True)
    if run.returncode != 0:
        raise RuntimeError(" ".join(cmd) + ": " + run.stderr.strip())
    with open(json_path) as f:
        return json.load(f), run.stdout


def calibrate(binary, trace, workers, cache, factor, scratch, speeds=None):
    """The speed-up at which round_robin's mean TTFT is `factor` x the
    oracle's: bisection on log(speed-up), round_robin only."""
    def ratio(s):
        d, _ = sim(binary, trace, workers, cache, s, "round_robin", scratch,
                   speeds=speeds)
        return d["results"][0]["ttft_ms"]["mean"] / d["oracle"]["ttft_ms"]["mean"]
    lo, hi = 0.05, 256.0
    if ratio(lo) >= factor:
        return lo
    for _ in range(14):
        mid = math.sqrt(lo * hi)
        if ratio(mid) < factor:
            lo = mid
        else:
            hi = mid
    return math.sqrt(lo * hi)


def scenarios(traces):
    """(name, trace, workers, cache, load, routers, delay, mixed speeds)."""
    out = []
    for t in traces:
        for w in (4, 8, 16, 32):
            for c in CACHES:
                for load in LOADS:
                    out.append((f"{t}_w{w}_{c}_{load}", t, w, c, load, 1, 0, False))
        for c in ("gpu256", "tiered"):
            out.append((f"{t}_w16_{c}_heavy_mixed", t, 16, c, "heavy", 1, 0, True))
            out.append((f"{t}_w16_{c}_heavy_r4", t, 16, c, "heavy", 4, 0, False))
            out.append((f"{t}_w16_{c}_heavy_r4_delay50", t, 16, c, "heavy", 4, 50, False))
        out.append((f"{t}_w8_tiered_light_r4_delay50", t, 8, "tiered", "light", 4, 50, False))
        out.append((f"{t}_w32_gpu256_heavy_mixed_r4", t, 32, "gpu256", "heavy", 4, 0, True))
    return out


def describe(s, speedup):
    _, t, w, c, load, r, delay, mix = s
    parts = [t, f"{w} workers", c, f"{load} (x{speedup:.3g})"]
    if mix:
        parts.append("speeds 0.5-1")
    if r > 1:
        parts.append(f"{r} routers")
    if delay:
        parts.append(f"state {delay} ms late")
    return ", ".join(parts)


def row(label, name, data, ratios_mean, ratios_p99, lost, losses):
    """One scenario's line of the matrix from its `kvmesh sim --json`
    data; appends its excess ratios and where kvmesh is not the lowest."""
    by = {x["policy"]: x for x in data["results"]}
    peers = [x for p, x in by.items() if p not in NOT_PEERS]
    o = data["oracle"]["ttft_ms"]
    km = by["kvmesh"]["ttft_ms"]
    cells = [label, f"{o['mean']:.0f} / {o['p99']:.0f}"]
    for stat, ratios in (("mean", ratios_mean), ("p99", ratios_p99)):
        best = min(peers, key=lambda x: x["ttft_ms"][stat])
        bv = best["ttft_ms"][stat]
        # A floor of 1% of the bound keeps a peer at the bound from making
        # the ratio infinite.
        floor = 0.01 * o[stat]
        ratio = (max(0.0, km[stat] - o[stat]) + floor) / (
            max(0.0, bv - o[stat]) + floor)
        ratios.append(ratio)
        cells += [f"{km[stat]:.0f}", f"{best['policy']} {bv:.0f}",
                  f"{ratio:.2f}"]
        if km[stat] > bv:
            lost[stat] += 1
            losses.append(f"{name}: {stat} {km[stat]:.0f} vs "
                          f"{best['policy']} {bv:.0f}")
    cells.append(f"{100 * by['kvmesh']['hit_ratio']['total']:.1f}")
    return "| " + " | ".join(cells) + " |"


def report(rows, ratios_mean, ratios_p99, lost, losses):
    def gmean(xs):
        return math.exp(sum(math.log(x) for x in xs) / len(xs))

    print("| scenario (load: arrival speed-up) | oracle mean / p99 | kvmesh mean"
          " | best peer mean | excess ratio | kvmesh p99 | best peer p99"
          " | excess ratio | kvmesh hit % |")
    print("|---|---|---:|---|---:|---:|---|---:|---:|")
    print("\n".join(rows))
    print()
    print(f"{len(rows)} scenarios; geometric mean of the excess ratio: "
          f"mean TTFT {gmean(ratios_mean):.2f}, p99 TTFT {gmean(ratios_p99):.2f}; "
          f"kvmesh lowest in {len(rows) - lost['mean']} of {len(rows)} on the "
          f"mean, {len(rows) - lost['p99']} on the p99.")
    if losses:
        print()
        print("Where kvmesh is not the lowest:")
        for l in losses:
            print(f"- {l}")


def replay(argv):
    """--replay OUT_DIR KVMESH_BINARY [flags...]: kvmesh alone, again."""
    if len(argv) < 2 or not os.path.isdir(argv[0]):
        print(__doc__, file=sys.stderr)
        return 2
    out, binary, flags = argv[0], argv[1], argv[2:]
    names = sorted(n[:-5] for n in os.listdir(out)
                   if n.endswith(".json") and n != "calibrate.json")
    if not names:
        print(f"sim_matrix: no scenario in {out}", file=sys.stderr)
        return 2
    rows, ratios_mean, ratios_p99, losses = [], [], [], []
    lost = {"mean": 0, "p99": 0}
    scratch = os.path.join(tempfile.mkdtemp(prefix="sim_matrix."), "k.json")
    try:
        for name in names:
            with open(os.path.join(out, name + ".json")) as f:
                data = json.load(f)
            sc = data["scenario"]
            cmd = [binary, "sim", "--trace", sc["trace"],
                   "--workers", str(sc["workers"]),
                   "--gpu-blocks", str(sc["gpu_blocks"]),
                   "--host-blocks", str(sc["host_blocks"]),
                   "--disk-blocks", str(sc["disk_blocks"]),
                   "--speedup", f"{sc['speedup']:.6g}",
                   "--routers", str(sc["routers"]),
                   "--state-delay-ms", f"{sc['state_delay_ms']:g}",
                   "--policy", "kvmesh", "--seed", str(sc["seed"]), "--quiet",
                   "--json", scratch] + flags
            if sc["worker_speeds"]:
                cmd += ["--worker-speeds",
                        ",".join(f"{v:.4g}" for v in sc["worker_speeds"])]
            run = subprocess.run(cmd, capture_output=True, text=True)
            if run.returncode != 0:
                raise RuntimeError(" ".join(cmd) + ": " + run.stderr.strip())
            with open(scratch) as f:
                mine = json.load(f)["results"][0]
            data["results"] = [x for x in data["results"]
                               if x["policy"] != "kvmesh"] + [mine]
            rows.append(row(name, name, data, ratios_mean, ratios_p99, lost,
                            losses))
    except (RuntimeError, OSError, ValueError, KeyError) as e:
        print(f"sim_matrix: {e}", file=sys.stderr)
        return 1
    finally:
        shutil.rmtree(os.path.dirname(scratch), ignore_errors=True)
    report(rows, ratios_mean, ratios_p99, lost, losses)
    return 0


def main(argv):
    if len(argv) >= 2 and argv[1] == "--replay":
        return replay(argv[2:])
    if len(argv) != 4 or not os.path.isdir(argv[2]):
        print(__doc__, file=sys.stderr)
        return 2
    binary, trace_dir, out = argv[1:]
    os.makedirs(out, exist_ok=True)
    traces = {"conversation": os.path.join(trace_dir, "mooncake_conversation.jsonl"),
              "synthetic": os.path.join(trace_dir, "mooncake_synthetic.jsonl")}
    scratch = os.path.join(out, "calibrate.json")
    speedups = {}
    rows, ratios_mean, ratios_p99, losses = [], [], [], []
    lost = {"mean": 0, "p99": 0}
    try:
        for s in scenarios(traces):
            name, t, w, c, load, r, delay, mix = s
            speeds = mixed(w) if mix else None
            key = (t, w, c, mix)
            if key not in speedups:
                speedups[key] = calibrate(binary, traces[t], w, c, HEAVY,
                                          scratch, speeds)
            su = speedups[key] * LOADS[load]
            data, table = sim(binary, traces[t], w, c, su, "all",
                              os.path.join(out, name + ".json"), r, delay, speeds)
            with open(os.path.join(out, name + ".txt"), "w") as f:
                f.write(table)
            rows.append(row(describe(s, su), name, data, ratios_mean,
                            ratios_p99, lost, losses))
            print(f"sim_matrix: {name} done", file=sys.stderr)
    except (RuntimeError, OSError, ValueError, KeyError) as e:
        print(f"sim_matrix: {e}", file=sys.stderr)
        return 1
    finally:
        if os.path.exists(scratch):
            os.remove(scratch)

    report(rows, ratios_mean, ratios_p99, lost, losses)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
