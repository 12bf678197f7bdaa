#!/usr/bin/env python3
"""Scrapes the /metrics endpoints of a running mesh and checks them.

usage: metrics_check.py SOURCE_ROOT ROUTED WORKERS ROLE[:KIND]=URL...

ROUTED is how many requests were routed through the one router, WORKERS
the ids of the agent's workers ("0,1,2"), each ROLE=URL (router, agent,
index, gateway) an endpoint; `agent:vllm` is an agent beside a real
engine's API, in a mesh of its own, whose front served one request sent
around the routers. The gateway is expected to have answered
/v1/models once (200), /health, a body that is not JSON, a model nobody
serves (404) and one completion routed and re-routed to its end (502). Checks the text format (HELP and TYPE for every family,
histogram buckets cumulative and ending in +Inf = _count), values that
follow from what was routed, that docs/metrics.md lists exactly the
families the processes serve (type and labels), and that every series the
Grafana dashboard queries is served by some process. Prints each problem;
exits 1 if there was one.
"""

import os
import re
import sys
import urllib.error
import urllib.request

problems = []


def bad(msg):
    problems.append(msg)


SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$")
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)",?')


def scrape(role, url):
    """{family: {"type", "help", "samples": [(name, {labels}, value)]}}"""
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            ctype = r.headers.get("Content-Type", "")
            text = r.read().decode("utf-8")
    except (urllib.error.URLError, OSError) as e:
        bad(f"{role}: GET {url}: {e}")
        return {}
    # text/plain is the text format 0.0.4 to Prometheus, with or without
    # the version parameter.
    if not ctype.startswith("text/plain"):
        bad(f"{role}: Content-Type '{ctype}' is not the text format 0.0.4")
    families = {}
    for n, line in enumerate(text.splitlines(), 1):
        if line.startswith("# HELP "):
            name, _, help_text = line[7:].partition(" ")
            families.setdefault(name, {"samples": []})["help"] = help_text
        elif line.startswith("# TYPE "):
            name, _, kind = line[7:].partition(" ")
            families.setdefault(name, {"samples": []})["type"] = kind
        elif line.startswith("#") or not line:
            continue
        else:
            m = SAMPLE.match(line)
            if not m:
                bad(f"{role}:{n}: not a sample: {line!r}")
                continue
            name, labels_text, value = m.groups()
            labels = dict(LABEL.findall(labels_text or ""))
            family = name
            for suffix in ("_bucket", "_sum", "_count"):
                base = name[: -len(suffix)]
                if name.endswith(suffix) and families.get(base, {}).get(
                        "type") in ("histogram", "summary"):
                    family = base
            if family not in families or "type" not in families[family]:
                bad(f"{role}:{n}: {name} has no TYPE line before it")
                continue
            families[family]["samples"].append((name, labels, float(value)))
    for name, f in families.items():
        if "help" not in f or "type" not in f:
            bad(f"{role}: {name} lacks its HELP or TYPE line")
        if f.get("type") == "histogram":
            check_histogram(role, name, f["samples"])
    return families


def check_histogram(role, name, samples):
    series = {}
    for sname, labels, v in samples:
        key = tuple(sorted((k, x) for k, x in labels.items() if k != "le"))
        s = series.setdefault(key, {"buckets": [], "count": None})
        if sname == name + "_bucket":
            le = labels.get("le")
            s["buckets"].append((float(le.replace("+Inf", "inf")), v))
        elif sname == name + "_count":
            s["count"] = v
    for key, s in series.items():
        b = s["buckets"]
        if not b or b[-1][0] != float("inf"):
            bad(f"{role}: {name}{key}: the last bucket is not le=+Inf")
            continue
        if any(b[i][1] > b[i + 1][1] for i in range(len(b) - 1)):
            bad(f"{role}: {name}{key}: buckets not cumulative: {b}")
        if s["count"] != b[-1][1]:
            bad(f"{role}: {name}{key}: _count {s['count']} != +Inf bucket "
                f"{b[-1][1]}")


def values(families, name, **labels):
    """The values of `name`'s samples whose labels include `labels`."""
    base = name
    for suffix in ("_bucket", "_sum", "_count"):
        if name.endswith(suffix) and name[: -len(suffix)] in families:
            base = name[: -len(suffix)]
    return [v for n, l, v in families.get(base, {}).get("samples", [])
            if n == name and all(l.get(k) == x for k, x in labels.items())]


def one(who, families, name, **labels):
    vs = values(families, name, **labels)
    if len(vs) != 1:
        bad(f"{who}: want one {name}{labels}, found {len(vs)}")
        return None
    return vs[0]


def expect(who, what, value, ok):
    if value is not None and not ok(value):
        bad(f"{who}: {what} is {value}")


def main(argv):
    if len(argv) < 4:
        print(__doc__, file=sys.stderr)
        return 2
    root, routed, workers = argv[0], int(argv[1]), argv[2].split(",")
    urls = dict(a.split("=", 1) for a in argv[3:])
    pages = {role: scrape(role, url) for role, url in urls.items()}

    for key, f in pages.items():
        role = key.split(":")[0]
        expect(key, "kvmesh_build_info",
               one(key, f, "kvmesh_build_info", role=role), lambda v: v == 1)
        # A mesh of one agent hears nobody on NATS.
        expect(key, "kvmesh_nats_messages_total{direction=in}",
               one(key, f, "kvmesh_nats_messages_total", direction="in"),
               (lambda v: v >= 0) if ":" in key else (lambda v: v > 0))
        for kind in ("RouteRequest", "KvBatch", "json"):
            expect(role, f"kvmesh_decode_errors_total{{kind={kind}}}",
                   one(role, f, "kvmesh_decode_errors_total", kind=kind),
                   lambda v: v == 0)

    r = pages.get("router", {})
    for name, ok in (("kvmesh_router_decisions_total", lambda v: v >= routed),
                     ("kvmesh_router_auction_seconds_count",
                      lambda v: v >= routed),
                     ("kvmesh_router_bids_per_auction_count",
                      lambda v: v >= routed),
                     ("kvmesh_router_winner_price_blocks_count",
                      lambda v: v >= routed),
                     ("kvmesh_router_held_requests", lambda v: v == 0)):
        expect("router", name, one("router", r, name), ok)
    expect("router", "kvmesh_router_requests_total{intake=core}",
           one("router", r, "kvmesh_router_requests_total", intake="core"),
           lambda v: v >= routed)
    expect("router", "kvmesh_router_workers{state=live}",
           one("router", r, "kvmesh_router_workers", state="live"),
           lambda v: v == len(workers))
    expect("router", "kvmesh_router_auction_seconds_sum",
           one("router", r, "kvmesh_router_auction_seconds_sum"),
           lambda v: 0 < v < 10 * routed)

    a = pages.get("agent", {})
    for w in workers:
        for name in ("kvmesh_worker_queued_blocks",
                     "kvmesh_worker_reserved_blocks",
                     "kvmesh_worker_active_blocks",
                     "kvmesh_worker_completed_total",
                     "kvmesh_worker_prompt_blocks_total"):
            expect("agent", f"{name}{{worker={w}}}",
                   one("agent", a, name, worker=w), lambda v: v >= 0)
        expect("agent", f"kvmesh_worker_capacity_blocks{{worker={w}}}",
               one("agent", a, "kvmesh_worker_capacity_blocks", worker=w),
               lambda v: v > 0)
        expect("agent", f"kvmesh_worker_draining{{worker={w}}}",
               one("agent", a, "kvmesh_worker_draining", worker=w),
               lambda v: v == 0)
        expect("agent", f"kvmesh_worker_speed{{worker={w}}}",
               one("agent", a, "kvmesh_worker_speed", worker=w),
               lambda v: v > 0)
        for tier in ("gpu", "host", "disk"):
            one("agent", a, "kvmesh_worker_cached_blocks", worker=w, tier=tier)
            one("agent", a, "kvmesh_worker_tier_capacity_blocks", worker=w,
                tier=tier)
        for state in ("waiting", "running"):
            one("agent", a, "kvmesh_worker_requests", worker=w, state=state)
    expect("agent", "kvmesh_worker_awards_total{result=accepted} summed",
           sum(values(a, "kvmesh_worker_awards_total", result="accepted")),
           lambda v: v >= routed)
    prompt = sum(values(a, "kvmesh_worker_prompt_blocks_total"))
    expect("agent", "kvmesh_worker_hit_blocks_total summed",
           sum(values(a, "kvmesh_worker_hit_blocks_total")),
           lambda v: 0 <= v <= prompt)

    g = pages.get("gateway")
    if g is not None:
        for name, labels, ok in (
                ("kvmesh_gateway_requests_total",
                 {"route": "models", "code": "200"}, lambda v: v == 1),
                ("kvmesh_gateway_requests_total",
                 {"route": "completions", "code": "400"}, lambda v: v == 1),
                ("kvmesh_gateway_requests_total",
                 {"route": "completions", "code": "404"}, lambda v: v == 1),
                ("kvmesh_gateway_requests_total",
                 {"route": "completions", "code": "502"}, lambda v: v == 1),
                ("kvmesh_gateway_bad_requests_total", {"reason": "not_json"},
                 lambda v: v == 1),
                ("kvmesh_gateway_bad_requests_total",
                 {"reason": "unknown_model"}, lambda v: v == 1),
                # Routed once, then again at most --max-reroutes (2) times.
                ("kvmesh_gateway_reroutes_total", {}, lambda v: v == 2),
                ("kvmesh_gateway_route_seconds_count", {}, lambda v: v == 3),
                ("kvmesh_gateway_requests_in_flight", {}, lambda v: v == 0),
                # Token ids: nothing tokenized, the 48 ids counted once
                # (re-routes aside); no worker answered a byte.
                ("kvmesh_gateway_tokenize_seconds_count", {"path": "engine"},
                 lambda v: v == 0),
                ("kvmesh_gateway_tokenize_seconds_count", {"path": "local"},
                 lambda v: v == 0),
                ("kvmesh_gateway_tokenize_handoffs_total", {"reason": "tools"},
                 lambda v: v == 0),
                ("kvmesh_gateway_prompt_tokens_total", {"source": "given"},
                 lambda v: v == 48),
                ("kvmesh_gateway_prompt_tokens_total", {"source": "local"},
                 lambda v: v == 0),
                ("kvmesh_gateway_time_to_first_byte_seconds_count", {},
                 lambda v: v == 0)):
            expect("gateway", f"{name}{labels}",
                   one("gateway", g, name, **labels), ok)

    e = pages.get("agent:vllm")
    if e is not None:
        for name, labels, ok in (
                ("kvmesh_worker_requests_bypassed_total", {"worker": "10"},
                 lambda v: v == 1),
                ("kvmesh_worker_requests_estimated_total", {"worker": "10"},
                 lambda v: v == 1),
                ("kvmesh_worker_requests_abandoned_total", {"worker": "10"},
                 lambda v: v == 0),
                ("kvmesh_worker_engine_up", {"worker": "10"},
                 lambda v: v == 1),
                ("kvmesh_worker_cache_resets_total", {"worker": "10"},
                 lambda v: v == 0),
                ("kvmesh_agent_kv_event_gaps_total", {}, lambda v: v == 0),
                ("kvmesh_agent_kv_event_faults_total", {"fault": "msgpack"},
                 lambda v: v == 0),
                ("kvmesh_worker_kv_mirror_faults_total",
                 {"worker": "10", "fault": "block_size"}, lambda v: v == 0)):
            expect("agent:vllm", f"{name}{labels}",
                   one("agent:vllm", e, name, **labels), ok)

    i = pages.get("index", {})
    expect("index", "kvmesh_index_shards",
           one("index", i, "kvmesh_index_shards", shard="0"), lambda v: v == 1)
    expect("index", "kvmesh_index_rocksdb_bytes",
           one("index", i, "kvmesh_index_rocksdb_bytes", shard="0"),
           lambda v: v > 0)
    expect("index", "kvmesh_index_errors_total",
           one("index", i, "kvmesh_index_errors_total", shard="0"),
           lambda v: v == 0)

    # docs/metrics.md lists exactly what is served, and the dashboard
    # queries only that (deploy_check.py's reading of both).
    sys.path.insert(0, os.path.join(root, "tests", "deploy"))
    import deploy_check  # noqa: E402  (needs python3-yaml)
    documented = deploy_check.read_metrics(os.path.join(root, "docs",
                                                        "metrics.md"))
    served = {}
    for role, f in pages.items():
        for name, fam in f.items():
            labels = set()
            for _, l, _ in fam["samples"]:
                labels |= set(l) - {"le"}
            kind, had = served.get(name, (fam.get("type"), set()))
            served[name] = (kind, had | labels)
    for name, (kind, labels) in sorted(documented.items()):
        if name not in served:
            bad(f"docs/metrics.md lists {name}; no process serves it")
        elif served[name] != (kind, labels):
            bad(f"{name}: docs/metrics.md says {kind} {sorted(labels)}, "
                f"served as {served[name][0]} {sorted(served[name][1])}")
    for name in sorted(set(served) - set(documented)):
        if name.startswith("kvmesh_"):
            bad(f"{name} is served but not in docs/metrics.md")
    import json
    with open(os.path.join(root, "deploy", "grafana", "kvmesh.json"),
              encoding="utf-8") as fh:
        dash = json.load(fh)
    queried = set()
    for expr in deploy_check.strings_in(dash, "expr"):
        names, _ = deploy_check.series_and_labels(expr)
        for n in names:
            for suffix in ("_bucket", "_sum", "_count"):
                if n.endswith(suffix) and n[: -len(suffix)] in served:
                    n = n[: -len(suffix)]
            queried.add(n)
    for n in sorted(queried):
        if not any(values(f, n) or f.get(n, {}).get("samples")
                   for f in pages.values()):
            bad(f"the dashboard queries {n}; no process serves a sample")
    problems.extend(deploy_check.problems)

    for p in problems:
        print(f"metrics: {p}")
    if not problems:
        print(f"metrics: {sum(len(f) for f in pages.values())} families from "
              f"{', '.join(sorted(pages))}; the dashboard's {len(queried)} "
              "series all served")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
