#!/usr/bin/env python3
"""Checks of deploy/ that need no cluster, no Docker engine and no network.

usage: deploy_check.py metrics DOC
       deploy_check.py dashboard DASHBOARD.json DOC
       deploy_check.py compose COMPOSE.yaml
       deploy_check.py kustomize [--kubectl KUBECTL]... DIR...
       deploy_check.py schema [--kubectl KUBECTL]... DIR...
       deploy_check.py nats [--kubectl KUBECTL]... OVERLAY_DIR AUTH.conf
       deploy_check.py dockerfile DOCKERFILE [KVMESH_BINARY]
       deploy_check.py entrypoint ENTRYPOINT.sh
       deploy_check.py systemd KVMESH.env UNIT...
       deploy_check.py smoke KVMESH_BINARY SOURCE_ROOT

Each prints what it found wrong, one line per problem, and exits 1 if
anything was; 2 for a bad invocation; 77 when it cannot run here (smoke
without nats-server). `kustomize` renders each kustomization with
`kubectl kustomize` (each KUBECTL given, `kubectl` by default; all must
render the same objects) and checks what the Kubernetes schemas cannot
say; `schema` validates the rendered objects against those schemas
(kubernetes-models in tests/npm, run by Node.js); `nats` checks an
overlay's NATS configuration with `nats-server -t` and runs its cluster on
loopback ports.
"""

import json
import os
import re
import subprocess
import sys
import tempfile

import yaml

# The checks live in modules beside this file; no bytecode in the source tree.
sys.dont_write_bytecode = True
from deploy_common import (DEFAULT_BLOCK_TOKENS, GATEWAY_LISTEN, bad, finish,
                           flag, problems)
from kustomize_check import cmd_kustomize, cmd_nats, cmd_schema
from smoke_check import cmd_smoke


# -- docs/metrics.md ----------------------------------------------------------

STANDARD_LABELS = {"le", "instance", "job", "pod", "namespace", "node",
                   "container", "quantile"}


def read_metrics(doc):
    """{name: (type, {labels})} from the rows of docs/metrics.md's tables."""
    out = {}
    row = re.compile(r"^\|\s*`(kvmesh_[a-z0-9_]+)`\s*\|([^|]*)\|([^|]*)\|")
    with open(doc, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            m = row.match(line)
            if not m:
                if line.startswith("| `kvmesh"):
                    bad(f"{doc}:{n}: a row that names no series: {line.strip()}")
                continue
            name, kind = m.group(1), m.group(2).strip()
            if kind not in ("counter", "gauge", "histogram"):
                bad(f"{doc}:{n}: {name}: type '{kind}' is not counter, gauge "
                    "or histogram")
            if kind == "counter" and not name.endswith("_total"):
                bad(f"{doc}:{n}: counter {name} does not end in _total")
            if kind != "counter" and name.endswith("_total"):
                bad(f"{doc}:{n}: {kind} {name} ends in _total")
            if name in out:
                bad(f"{doc}:{n}: {name} listed twice")
            # Label names are the backticked words outside parentheses (inside
            # them are the label's values).
            labels = set(re.findall(r"`([a-z_]+)`",
                                    re.sub(r"\([^)]*\)", "", m.group(3))))
            out[name] = (kind, labels)
    if not out:
        bad(f"{doc}: no series found (rows of the form | `kvmesh_...` |)")
    return out


def cmd_metrics(args):
    metrics = read_metrics(args[0])
    for name, (kind, labels) in sorted(metrics.items()):
        print(f"{name} {kind} {','.join(sorted(labels))}")
    return finish("metrics")


# -- the Grafana dashboard ----------------------------------------------------

PROMQL_FUNCTIONS = {
    "abs", "absent", "absent_over_time", "avg", "avg_over_time", "bottomk",
    "ceil", "changes", "clamp", "clamp_max", "clamp_min", "count",
    "count_over_time", "count_values", "day_of_month", "day_of_week", "delta",
    "deriv", "exp", "floor", "group", "histogram_quantile", "holt_winters",
    "hour", "idelta", "increase", "irate", "label_join", "label_replace",
    "last_over_time", "ln", "log10", "log2", "max", "max_over_time", "min",
    "min_over_time", "minute", "month", "predict_linear", "quantile",
    "quantile_over_time", "rate", "resets", "round", "scalar", "sgn", "sort",
    "sort_desc", "sqrt", "stddev", "stdvar", "sum", "sum_over_time", "time",
    "timestamp", "topk", "vector", "year",
}
PROMQL_WORDS = {"by", "without", "on", "ignoring", "group_left", "group_right",
                "and", "or", "unless", "bool", "offset", "inf", "nan"}
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")


def strings_in(node, key):
    """Every string value under `key`, anywhere in a JSON document."""
    if isinstance(node, dict):
        for k, v in node.items():
            if k == key and isinstance(v, str):
                yield v
            else:
                yield from strings_in(v, key)
    elif isinstance(node, list):
        for v in node:
            yield from strings_in(v, key)


def series_and_labels(expr):
    """(series names, label names) a PromQL expression refers to."""
    e = re.sub(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'', '""', expr)
    e = re.sub(r"\$\{[^}]*\}|\$\w+", "", e)  # Grafana variables
    e = re.sub(r"\[[^\]]*\]", "", e)  # ranges and subqueries
    labels = set()
    for m in re.finditer(r"\{([^}]*)\}", e):  # matchers
        labels |= set(re.findall(r"([a-zA-Z_]\w*)\s*(?:=~|!~|!=|=)", m.group(1)))
    e = re.sub(r"\{[^}]*\}", " ", e)
    grouping = r"\b(by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)"
    for m in re.finditer(grouping, e):
        labels |= set(re.findall(r"[a-zA-Z_]\w*", m.group(2)))
    e = re.sub(grouping, " ", e)
    names, functions = set(), set()
    # Not inside a number or a duration: 1e3, 5m.
    for m in re.finditer(r"(?<![\w.])([a-zA-Z_:][\w:]*)(\s*\()?", e):
        word = m.group(1)
        if m.group(2):
            functions.add(word)
        elif word.lower() not in PROMQL_WORDS:
            names.add(word)
    for f in functions - PROMQL_FUNCTIONS:
        bad(f"'{f}(' in '{expr}' is not a PromQL function")
    return names, labels


def cmd_dashboard(args):
    path, doc = args
    metrics = read_metrics(doc)
    with open(path, encoding="utf-8") as f:
        dash = json.load(f)
    exprs = list(strings_in(dash, "expr"))
    if not exprs:
        bad(f"{path}: no query (expr) found")
    known_labels = STANDARD_LABELS.union(*(l for _, l in metrics.values()))
    used = set()
    for expr in exprs:
        names, labels = series_and_labels(expr)
        for name in names:
            base = name
            for suffix in HISTOGRAM_SUFFIXES:
                if name.endswith(suffix) and name[: -len(suffix)] in metrics:
                    base = name[: -len(suffix)]
            if base not in metrics:
                bad(f"{path}: '{name}' is not a series of {doc} "
                    f"(in '{expr}')")
                continue
            used.add(base)
            kind = metrics[base][0]
            if base != name and kind != "histogram":
                bad(f"{path}: '{name}': {base} is a {kind}, not a histogram")
            if kind == "histogram" and base == name:
                bad(f"{path}: histogram {base} queried without "
                    "_bucket, _sum or _count")
        for label in labels - known_labels:
            bad(f"{path}: label '{label}' is on no series of {doc} "
                f"(in '{expr}')")
    for legend in strings_in(dash, "legendFormat"):
        for label in set(re.findall(r"\{\{\s*(\w+)\s*\}\}", legend)):
            if label not in known_labels:
                bad(f"{path}: legend '{legend}' names label '{label}', on no "
                    f"series of {doc}")
    ids = [p.get("id") for p in walk_panels(dash.get("panels", []))]
    if len(ids) != len(set(ids)):
        bad(f"{path}: panel ids repeat")
    for p in walk_panels(dash.get("panels", [])):
        if p.get("type") != "row" and not p.get("targets"):
            bad(f"{path}: panel '{p.get('title')}' has no query")
    if not problems:
        print(f"dashboard: {len(exprs)} queries name {len(used)} series, all "
              f"in {doc} ({len(metrics)} listed)")
    return finish("dashboard")


def walk_panels(panels):
    for p in panels:
        yield p
        yield from walk_panels(p.get("panels", []))


# -- compose ------------------------------------------------------------------

COMPOSE_TOP = {"name", "services", "volumes", "networks", "configs",
               "secrets", "version"}
KVMESH_ROLES = ("agent", "router", "index", "gateway")


def cmd_compose(args):
    path = args[0]
    with open(path, encoding="utf-8") as f:
        doc = yaml.safe_load(f)  # resolves anchors and << merge keys
    if not isinstance(doc, dict) or not isinstance(doc.get("services"), dict):
        bad(f"{path}: no services mapping")
        return finish("compose")
    for key in doc:
        if key not in COMPOSE_TOP and not key.startswith("x-"):
            bad(f"{path}: unknown top-level key '{key}'")
    services = doc["services"]
    volumes = doc.get("volumes") or {}
    shards, ranges, routers, agents, gateways = {}, [], [], [], []
    blocks = {}  # service: its --block-tokens
    for name, s in services.items():
        where = f"{path}: service {name}"
        if not isinstance(s, dict):
            bad(f"{where}: not a mapping")
            continue
        if "image" not in s and "build" not in s:
            bad(f"{where}: neither image nor build")
        for dep in s.get("depends_on") or {}:
            if dep not in services:
                bad(f"{where}: depends on unknown service {dep}")
        for v in s.get("volumes") or []:
            source = v.split(":")[0] if isinstance(v, str) else v.get("source")
            if source and not source.startswith((".", "/", "~")) \
                    and source not in volumes:
                bad(f"{where}: volume {source} is not declared")
        cmd = s.get("command")
        if cmd is None:
            continue
        if not isinstance(cmd, list) or \
                not all(isinstance(a, str) for a in cmd):
            bad(f"{where}: command is not a list of strings")
            continue
        if s.get("image", "").startswith("kvmesh") and cmd[0] in \
                KVMESH_ROLES:
            test = " ".join((s.get("healthcheck") or {}).get("test") or [])
            if "/readyz" not in test:
                bad(f"{where}: its healthcheck does not ask /readyz")
            nats = flag(cmd, "--nats")
            host = re.sub(r"^\w+://", "", nats or "").split(":")[0]
            if host not in services:
                bad(f"{where}: --nats {nats} names no service")
            if cmd[0] != "index":
                blocks[name] = flag(cmd, "--block-tokens") or \
                    DEFAULT_BLOCK_TOKENS
        if cmd[0] == "index":
            spec = flag(cmd, "--shard") or ""
            m = re.fullmatch(r"(\d+)/(\d+)", spec)
            if not m:
                bad(f"{where}: --shard '{spec}' is not I/N")
                continue
            shards[name] = (int(m.group(1)), int(m.group(2)))
            if not flag(cmd, "--db"):
                bad(f"{where}: index without --db")
            elif not any(flag(cmd, "--db").startswith(
                    (v.split(":")[1] if isinstance(v, str) else v["target"]))
                    for v in s.get("volumes") or []):
                bad(f"{where}: --db {flag(cmd, '--db')} is on no volume")
        elif cmd[0] == "agent":
            first = int(flag(cmd, "--worker-id") or 0)
            ranges.append((first, first + int(flag(cmd, "--workers") or 0),
                           name))
            agents.append(flag(cmd, "--name") or f"agent-{first}")
        elif cmd[0] == "router":
            if not flag(cmd, "--name"):
                bad(f"{where}: router without --name (router-<pid> repeats "
                    "across containers)")
            routers.append(flag(cmd, "--name"))
        elif cmd[0] == "gateway":
            check_compose_gateway(where, s, cmd)
            gateways.append(flag(cmd, "--name"))
    if not gateways:
        bad(f"{path}: no gateway service (kvmesh gateway, the clients' URL)")
    if len(set(blocks.values())) > 1:
        bad(f"{path}: block sizes differ (--block-tokens, rule 4): {blocks}")
    counts = {n for _, n in shards.values()}
    if len(counts) > 1:
        bad(f"{path}: index shards disagree on the shard count: {shards}")
    elif counts:
        n = counts.pop()
        if sorted(i for i, _ in shards.values()) != list(range(n)):
            bad(f"{path}: shards {sorted(shards.values())} are not 0..{n - 1}")
    ranges.sort()
    for (a0, a1, an), (b0, _, bn) in zip(ranges, ranges[1:]):
        if b0 < a1:
            bad(f"{path}: agents {an} and {bn} share worker ids")
    for what, names in (("router", routers), ("agent", agents),
                        ("gateway", gateways)):
        if len(names) != len(set(names)):
            bad(f"{path}: {what} names repeat: {names}")
    if not problems:
        print(f"compose: {len(services)} services; {len(shards)} index "
              f"shards, {len(ranges)} agents, {len(routers)} routers, "
              f"{len(gateways)} gateways")
    return finish("compose")


def check_compose_gateway(where, s, cmd):
    """A gateway is named (its inbox carries the name) and its --listen
    port is published on the host."""
    if not flag(cmd, "--name"):
        bad(f"{where}: gateway without --name (gateway-<pid> repeats across "
            "containers)")
    listen = flag(cmd, "--listen") or GATEWAY_LISTEN
    port = listen.rsplit(":", 1)[-1]
    published = [str(p.get("target")) if isinstance(p, dict)
                 else str(p).split("/")[0].rsplit(":", 1)[-1]
                 for p in s.get("ports") or []]
    if port not in published:
        bad(f"{where}: --listen {listen}: port {port} is not published "
            f"(ports: {s.get('ports')})")

# -- Dockerfile ---------------------------------------------------------------

def cmd_dockerfile(args):
    path = args[0]
    binary = args[1] if len(args) > 1 else None
    with open(path, encoding="utf-8") as f:
        text = re.sub(r"\\\n", " ", f.read())
    lines = [l.strip() for l in text.splitlines()
             if l.strip() and not l.strip().startswith("#")]
    stages = [l for l in lines if l.upper().startswith("FROM ")]
    if len(stages) < 2:
        bad(f"{path}: not multi-stage")
    for s in stages:
        if not re.match(r"FROM\s+debian:12\b", s, re.I):
            bad(f"{path}: '{s}' is not on debian:12")
    runtime = lines[lines.index(stages[-1]):] if stages else []
    users = [l.split()[1] for l in runtime if l.upper().startswith("USER ")]
    if not users or users[-1].split(":")[0] in ("0", "root"):
        bad(f"{path}: the runtime stage does not switch to a non-root user")
    installed = set()
    for l in runtime:
        m = re.search(r"apt-get install (.*?)(?:&&|$)", l)
        if m:
            installed |= {w for w in m.group(1).split()
                          if not w.startswith("-")}
    dev = sorted(p for p in installed if p.endswith("-dev"))
    if dev:
        bad(f"{path}: the runtime stage installs -dev packages {dev}")
    if "nats-server" in installed:
        bad(f"{path}: nats-server belongs to its own image")
    root = os.path.dirname(os.path.dirname(os.path.abspath(path)))
    named = set()
    for l in lines:
        if l.upper().startswith(("RUN ", "COPY ")):
            named |= set(re.findall(r"\b((?:deploy|scripts)/[\w./-]+)", l))
    for f in sorted(named):
        if not os.path.exists(os.path.join(root, f)):
            bad(f"{path}: {f} does not exist")
    if binary:
        check_runtime_libs(path, binary, installed)
    if not problems:
        print(f"dockerfile: {len(stages)} stages, runtime packages "
              f"{sorted(installed)}")
    return finish("dockerfile")


def dpkg_field(package, field):
    r = subprocess.run(["dpkg-query", "-W", "-f=${" + field + "}", package],
                       text=True, capture_output=True)
    return r.stdout if r.returncode == 0 else ""


def check_runtime_libs(path, binary, installed):
    """Every shared library the binary loads comes from a package the
    runtime stage installs, one of their dependencies, or the base image
    (Priority required or important)."""
    try:
        ldd = subprocess.run(["ldd", binary], text=True, capture_output=True,
                             check=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        print(f"dockerfile: skip the library check: ldd {binary}: {e}")
        return
    deps = set(installed)
    for p in installed:
        for alt in dpkg_field(p, "Depends").split(","):
            deps |= {re.split(r"[ :(]", a.strip())[0] for a in alt.split("|")}
    for lib in re.findall(r"=>\s+(/\S+)", ldd):
        real = os.path.realpath(lib)
        owner = None
        for candidate in (real, lib, real.replace("/usr/lib/", "/lib/"),
                          real.replace("/lib/", "/usr/lib/", 1)):
            r = subprocess.run(["dpkg", "-S", candidate], text=True,
                               capture_output=True)
            if r.returncode == 0:
                owner = r.stdout.split(":")[0].strip()
                break
        if owner is None:
            bad(f"{path}: {lib} belongs to no Debian package")
            continue
        if owner in deps:
            continue
        if dpkg_field(owner, "Priority") in ("required", "important"):
            continue
        bad(f"{path}: kvmesh loads {os.path.basename(real)} from {owner}, "
            "which the runtime stage does not install")


# -- the Kubernetes entrypoint ------------------------------------------------

def cmd_entrypoint(args):
    script = os.path.abspath(args[0])
    with tempfile.TemporaryDirectory() as tmp:
        stub = os.path.join(tmp, "kvmesh")
        with open(stub, "w") as f:
            f.write('#!/bin/sh\n'
                    'case "$*" in *--help*) [ "$1" = router ] && '
                    'echo "  --metrics-port UINT"; exit 0;; esac\n'
                    'echo "$*"\n')
        os.chmod(stub, 0o755)
        idmap = os.path.join(tmp, "worker-ids")
        with open(idmap, "w") as f:
            f.write("# node first [workers]\n\ngpu-a 0\ngpu-b 8 4\n")
        overlap = os.path.join(tmp, "overlap")
        with open(overlap, "w") as f:
            f.write("gpu-a 0\ngpu-b 7\n")
        base = {"PATH": f"{tmp}:/usr/bin:/bin",
                "KVMESH_NATS_URL": "nats://n:4222"}
        # kvmesh reads KVMESH_* itself: the script adds only what differs
        # per pod.
        cases = [
            ("index shard from the ordinal",
             ["index"], {"POD_NAME": "kvmesh-index-1", "INDEX_SHARDS": "2"},
             0, "index --shard 1/2\n"),
            ("index ordinal past INDEX_SHARDS",
             ["index"], {"POD_NAME": "kvmesh-index-2", "INDEX_SHARDS": "2"},
             2, "must be equal"),
            ("index without INDEX_SHARDS",
             ["index"], {"POD_NAME": "kvmesh-index-0"}, 2, "INDEX_SHARDS"),
            ("router named after its pod, extra flags",
             ["router"], {"POD_NAME": "kvmesh-router-x1",
                          "ROUTER_ARGS": "--durable --fanout 8"},
             0, "router --name kvmesh-router-x1 --durable --fanout 8\n"),
            ("gateway named after its pod, extra flags",
             ["gateway"], {"POD_NAME": "kvmesh-gateway-7c4-q2x9z",
                           "GATEWAY_ARGS": "--max-reroutes 1"},
             0, "gateway --name kvmesh-gateway-7c4-q2x9z --max-reroutes 1\n"),
            ("gateway without KVMESH_NATS_URL", ["gateway"],
             {"KVMESH_NATS_URL": ""}, 2, "gateway: KVMESH_NATS_URL"),
            ("agent ids from the map, a line's own count",
             ["agent", "--heartbeat-ms", "500"],
             {"KVMESH_AGENT_WORKERS": "8", "NODE_NAME": "gpu-b",
              "WORKER_ID_MAP": idmap, "AGENT_ARGS": "--gpu-blocks 64"},
             0, "agent --workers 4 --worker-id 8 --heartbeat-ms 500 "
                "--gpu-blocks 64\n"),
            ("agent on a node missing from the map",
             ["agent"], {"KVMESH_AGENT_WORKERS": "8", "NODE_NAME": "gpu-z",
                         "WORKER_ID_MAP": idmap}, 2, "has no line"),
            ("agent with overlapping ranges in the map",
             ["agent"], {"KVMESH_AGENT_WORKERS": "8", "NODE_NAME": "gpu-a",
                         "WORKER_ID_MAP": overlap}, 2, "share worker ids"),
            ("agent beside an engine, ids from the pod's ordinal",
             ["agent"], {"KVMESH_AGENT_WORKERS": "2", "WORKER_IDS": "ordinal",
                         "POD_NAME": "kvmesh-vllm-3",
                         "KVMESH_AGENT_ENGINE": "vllm"},
             0, "agent --data-parallel-size 2 --worker-id 6 "
                "--name kvmesh-vllm-3\n"),
            ("agent ids by ordinal on a pod without one",
             ["agent"], {"KVMESH_AGENT_WORKERS": "2", "WORKER_IDS": "ordinal",
                         "POD_NAME": "kvmesh-vllm"}, 2, "does not end in -I"),
            ("agent with a fixed first id",
             ["agent"], {"KVMESH_AGENT_WORKERS": "4",
                         "KVMESH_AGENT_WORKER_ID": "0"},
             0, "--workers 4 --worker-id 0"),
            ("no KVMESH_NATS_URL", ["router"], {"KVMESH_NATS_URL": ""}, 2,
             "KVMESH_NATS_URL"),
            ("a config file instead of KVMESH_NATS_URL", ["router"],
             {"KVMESH_NATS_URL": "", "KVMESH_CONFIG": "/etc/k.toml",
              "POD_NAME": "r"}, 0, "router --name r\n"),
            ("other commands pass through",
             ["admin", "--nats", "x", "workers"], {}, 0,
             "admin --nats x workers"),
        ]
        for name, argv, env, want_rc, want in cases:
            r = subprocess.run([script] + argv, env={**base, **env},
                               text=True, capture_output=True)
            text = r.stdout + r.stderr
            if r.returncode != want_rc or want not in text:
                bad(f"{name}: exit {r.returncode} (want {want_rc}), output "
                    f"{text.strip()!r} lacks {want!r}")
    if not problems:
        print(f"entrypoint: {len(cases)} cases")
    return finish("entrypoint")

# -- systemd units --------------------------------------------------------------

# What every unit sets: the sandbox, the user, the restart policy (exit 2
# is a usage error a restart cannot fix) and the start limit.
UNIT_SETTINGS = [
    "User=kvmesh", "Group=kvmesh", "EnvironmentFile=/etc/kvmesh/kvmesh.env",
    "Restart=on-failure", "RestartPreventExitStatus=2",
    "StartLimitIntervalSec=10min", "StartLimitBurst=30",
    "NoNewPrivileges=yes", "CapabilityBoundingSet=", "AmbientCapabilities=",
    "ProtectSystem=strict", "ProtectHome=yes", "PrivateTmp=yes",
    "PrivateDevices=yes", "ProtectHostname=yes", "ProtectClock=yes",
    "ProtectKernelTunables=yes", "ProtectKernelModules=yes",
    "ProtectKernelLogs=yes", "ProtectControlGroups=yes",
    "ProtectProc=invisible",
    "RestrictAddressFamilies=AF_INET AF_INET6 AF_UNIX",
    "RestrictNamespaces=yes", "RestrictRealtime=yes", "RestrictSUIDSGID=yes",
    "LockPersonality=yes", "MemoryDenyWriteExecute=yes",
    "SystemCallArchitectures=native", "SystemCallFilter=@system-service",
    "SystemCallErrorNumber=EPERM", "UMask=0077",
]


def cmd_systemd(args):
    """Every unit is sandboxed like the others, and every variable its
    ExecStart names is a key of kvmesh.env."""
    env_path, units = args[0], args[1:]
    keys = set()
    with open(env_path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if line and not line.startswith("#"):
                keys.add(line.partition("=")[0])
    for unit in units:
        name = os.path.basename(unit)
        with open(unit, encoding="utf-8") as f:
            text = re.sub(r"\\\n", " ", f.read())
        lines = {l.strip() for l in text.splitlines()}
        for want in UNIT_SETTINGS:
            if want not in lines:
                bad(f"{name}: lacks {want}")
        m = re.search(r"^ExecStart=(.*)$", text, re.M)
        if not m:
            bad(f"{name}: no ExecStart")
            continue
        for var in re.findall(r"\$\{?(\w+)\}?", m.group(1)):
            if var not in keys:
                bad(f"{name}: ExecStart uses ${var}, which {env_path} does "
                    "not set")
    if not problems:
        print(f"systemd: {len(units)} units sandboxed alike, their "
              f"variables in {os.path.basename(env_path)}")
    return finish("systemd")


def main(argv):
    commands = {"metrics": (cmd_metrics, 1, 1),
                "dashboard": (cmd_dashboard, 2, 2),
                "compose": (cmd_compose, 1, 1),
                "kustomize": (cmd_kustomize, 1, 99),
                "schema": (cmd_schema, 1, 99),
                "nats": (cmd_nats, 2, 6),
                "dockerfile": (cmd_dockerfile, 1, 2),
                "entrypoint": (cmd_entrypoint, 1, 1),
                "systemd": (cmd_systemd, 2, 99),
                "smoke": (cmd_smoke, 2, 2)}
    if len(argv) < 2 or argv[1] not in commands:
        print(__doc__, file=sys.stderr)
        return 2
    fn, lo, hi = commands[argv[1]]
    if not lo <= len(argv) - 2 <= hi:
        print(__doc__, file=sys.stderr)
        return 2
    return fn(argv[2:])


if __name__ == "__main__":
    sys.exit(main(sys.argv))
