#!/usr/bin/env python3
"""Checks of deploy/ that need no cluster, no Docker engine and no network.

usage: deploy_check.py metrics DOC
       deploy_check.py dashboard DASHBOARD.json DOC
       deploy_check.py compose COMPOSE.yaml
       deploy_check.py kustomize [--kubectl] DIR...
       deploy_check.py dockerfile DOCKERFILE [KVMESH_BINARY]
       deploy_check.py entrypoint ENTRYPOINT.sh
       deploy_check.py smoke KVMESH_BINARY SOURCE_ROOT

Each prints what it found wrong, one line per problem, and exits 1 if
anything was; 2 for a bad invocation; 77 when it cannot run here (smoke
without nats-server). `kustomize` renders each
kustomization with a stand-in written here (resources, patches, replicas,
images: what deploy/kubernetes uses) and validates the objects; with
--kubectl it also renders with the real `kubectl kustomize`, validates that
output too and requires both renderings to agree. The stand-in exists for
machines without kubectl (Debian 12 does not package it); it is not
kustomize.
"""

import json
import os
import re
import subprocess
import sys
import tempfile

import yaml

problems = []


def bad(msg):
    problems.append(msg)


def finish(what):
    for p in problems:
        print(f"{what}: {p}")
    return 1 if problems else 0


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


def flag(cmd, name):
    """The value after `name` in a command list, or None."""
    for i, a in enumerate(cmd[:-1]):
        if a == name:
            return cmd[i + 1]
    return None


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
    shards, ranges, routers, agents = {}, [], [], []
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
        if s.get("image", "").startswith("kvmesh") and cmd[0] in (
                "agent", "router", "index"):
            nats = flag(cmd, "--nats")
            host = re.sub(r"^\w+://", "", nats or "").split(":")[0]
            if host not in services:
                bad(f"{where}: --nats {nats} names no service")
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
    for what, names in (("router", routers), ("agent", agents)):
        if len(names) != len(set(names)):
            bad(f"{path}: {what} names repeat: {names}")
    if not problems:
        print(f"compose: {len(services)} services; {len(shards)} index "
              f"shards, {len(ranges)} agents, {len(routers)} routers")
    return finish("compose")


# -- kustomize: the stand-in --------------------------------------------------

KUSTOMIZATION_KEYS = {"apiVersion", "kind", "resources", "patches",
                      "replicas", "images"}
# Strategic-merge keys of the lists deploy/kubernetes patches (from the
# Kubernetes API's patchMergeKey); any other list is replaced.
MERGE_KEYS = {"containers": "name", "initContainers": "name", "env": "name",
              "volumes": "name", "volumeMounts": "mountPath",
              "imagePullSecrets": "name"}
WORKLOADS = {"Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job"}


class Unsupported(Exception):
    pass


def load_docs(path):
    with open(path, encoding="utf-8") as f:
        return [d for d in yaml.safe_load_all(f) if d is not None]


def merge_key(key, ctx):
    if key == "ports":
        return "containerPort" if "containers" in ctx else "port"
    return MERGE_KEYS.get(key)


def drop_nulls(v):
    if isinstance(v, dict):
        return {k: drop_nulls(x) for k, x in v.items() if x is not None}
    if isinstance(v, list):
        return [drop_nulls(x) for x in v]
    return v


def smp(base, patch, ctx):
    """A strategic merge patch of the kinds deploy/kubernetes uses: maps
    merge, null deletes, lists with a merge key merge by it, other lists
    are replaced. Directives ($patch, ...) are not implemented."""
    out = dict(base)
    for k, v in patch.items():
        if k.startswith("$"):
            raise Unsupported(f"patch directive {k}")
        if v is None:
            out.pop(k, None)
        elif k not in out:
            out[k] = drop_nulls(v)
        elif isinstance(out[k], dict) and isinstance(v, dict):
            out[k] = smp(out[k], v, ctx + [k])
        elif isinstance(out[k], list) and isinstance(v, list) and \
                merge_key(k, ctx):
            # As kustomize orders them: the patch's items first, in its
            # order (merged with the base's item of the same key), then the
            # base's items the patch does not name.
            mk = merge_key(k, ctx)
            merged, named = [], set()
            for item in v:
                if not isinstance(item, dict) or mk not in item:
                    raise Unsupported(f"list {k} item without {mk}")
                named.add(item[mk])
                at = [x for x in out[k]
                      if isinstance(x, dict) and x.get(mk) == item[mk]]
                merged.append(smp(at[0], item, ctx + [k]) if at
                              else drop_nulls(item))
            merged += [x for x in out[k]
                       if not (isinstance(x, dict) and x.get(mk) in named)]
            out[k] = merged
        else:
            out[k] = drop_nulls(v)
    return out


def pod_specs(obj):
    spec = obj.get("spec") or {}
    if obj.get("kind") in WORKLOADS:
        yield ((spec.get("template") or {}).get("spec")) or {}
    elif obj.get("kind") == "CronJob":
        yield spec["jobTemplate"]["spec"]["template"]["spec"]


def containers(obj):
    for ps in pod_specs(obj):
        for c in (ps.get("initContainers") or []) + (ps.get("containers") or []):
            yield ps, c


def render(directory):
    path = os.path.join(directory, "kustomization.yaml")
    with open(path, encoding="utf-8") as f:
        k = yaml.safe_load(f) or {}
    extra = set(k) - KUSTOMIZATION_KEYS
    if extra:
        raise Unsupported(f"{path}: {sorted(extra)} (the stand-in knows "
                          f"{sorted(KUSTOMIZATION_KEYS)})")
    objs = []
    for r in k.get("resources") or []:
        p = os.path.normpath(os.path.join(directory, r))
        objs += render(p) if os.path.isdir(p) else load_docs(p)
    def find(kind, name):
        hits = [o for o in objs if o.get("kind") == kind and
                (o.get("metadata") or {}).get("name") == name]
        if len(hits) != 1:
            raise Unsupported(f"{path}: {len(hits)} objects {kind}/{name}")
        return hits[0]
    for p in k.get("patches") or []:
        if set(p) - {"path", "patch"}:
            raise Unsupported(f"{path}: patch keys {sorted(set(p))}")
        docs = (load_docs(os.path.join(directory, p["path"])) if "path" in p
                else list(yaml.safe_load_all(p["patch"])))
        for d in docs:
            target = find(d.get("kind"), d["metadata"]["name"])
            objs[objs.index(target)] = smp(target, d, [])
    for r in k.get("replicas") or []:
        hits = [o for o in objs if o.get("kind") in WORKLOADS and
                o["metadata"]["name"] == r["name"]]
        if not hits:
            raise Unsupported(f"{path}: replicas: no workload {r['name']}")
        for o in hits:
            o["spec"]["replicas"] = r["count"]
    for img in k.get("images") or []:
        for o in objs:
            for _, c in containers(o):
                m = re.fullmatch(r"([^@]+?)(?::([^:/@]+))?(@.+)?", c["image"])
                if m and m.group(1) == img["name"]:
                    name = img.get("newName", m.group(1))
                    tag = img.get("newTag", m.group(2))
                    c["image"] = name + (f":{tag}" if tag else "") + \
                        (m.group(3) or "")
    return objs


def labels_match(selector, labels):
    return all((labels or {}).get(k) == v for k, v in selector.items())


def validate(objs, where):
    """What a kustomize rendering must satisfy to be applied and to run."""
    by = {}
    for o in objs:
        for key in ("apiVersion", "kind"):
            if not o.get(key):
                bad(f"{where}: an object without {key}: {str(o)[:80]}")
        name = (o.get("metadata") or {}).get("name")
        if not name:
            bad(f"{where}: {o.get('kind')} without metadata.name")
            continue
        if (o.get("metadata") or {}).get("namespace"):
            bad(f"{where}: {o['kind']}/{name} sets a namespace (the base is "
                "namespace-agnostic)")
        if (o.get("kind"), name) in by:
            bad(f"{where}: {o['kind']}/{name} twice")
        by[(o.get("kind"), name)] = o
    configmaps = {n: o.get("data") or {} for (k, n), o in by.items()
                  if k == "ConfigMap"}
    templates = []  # (workload, pod template labels)
    for (kind, name), o in by.items():
        if kind not in WORKLOADS:
            continue
        spec = o.get("spec") or {}
        sel = (spec.get("selector") or {}).get("matchLabels") or {}
        tlabels = ((spec.get("template") or {}).get("metadata") or {}).get(
            "labels") or {}
        if not sel:
            bad(f"{where}: {kind}/{name} has no selector.matchLabels")
        elif not labels_match(sel, tlabels):
            bad(f"{where}: {kind}/{name}: selector {sel} does not match its "
                f"template's labels {tlabels}")
        templates.append((o, tlabels))
        ps = (spec.get("template") or {}).get("spec") or {}
        vols = {v["name"] for v in ps.get("volumes") or []}
        vols |= {t["metadata"]["name"]
                 for t in spec.get("volumeClaimTemplates") or []}
        for v in ps.get("volumes") or []:
            cm = (v.get("configMap") or {}).get("name")
            if cm and cm not in configmaps:
                bad(f"{where}: {kind}/{name}: volume {v['name']} uses "
                    f"missing ConfigMap {cm}")
        names = [c["name"] for _, c in containers(o)]
        if len(names) != len(set(names)):
            bad(f"{where}: {kind}/{name}: container names repeat")
        for _, c in containers(o):
            cw = f"{where}: {kind}/{name} container {c['name']}"
            if not c.get("image"):
                bad(f"{cw}: no image")
            for m in c.get("volumeMounts") or []:
                if m["name"] not in vols:
                    bad(f"{cw}: mounts undeclared volume {m['name']}")
            for e in c.get("envFrom") or []:
                cm = (e.get("configMapRef") or {}).get("name")
                if cm and cm not in configmaps:
                    bad(f"{cw}: envFrom missing ConfigMap {cm}")
            for e in c.get("env") or []:
                ref = (e.get("valueFrom") or {}).get("configMapKeyRef")
                if ref and ref.get("key") not in configmaps.get(
                        ref.get("name"), {}):
                    bad(f"{cw}: env {e['name']} refers to missing "
                        f"{ref.get('name')}/{ref.get('key')}")
        if kind == "StatefulSet":
            svc = by.get(("Service", spec.get("serviceName")))
            if not svc:
                bad(f"{where}: StatefulSet/{name}: serviceName "
                    f"{spec.get('serviceName')} is no Service")
            elif (svc.get("spec") or {}).get("clusterIP") != "None":
                bad(f"{where}: StatefulSet/{name}: Service "
                    f"{spec.get('serviceName')} is not headless")
        check_kvmesh_pod(o, tlabels, configmaps, where)
    for (kind, name), o in by.items():
        spec = o.get("spec") or {}
        if kind == "Service":
            sel = spec.get("selector") or {}
            pods = [w for w, l in templates if labels_match(sel, l)]
            if not sel or not pods:
                bad(f"{where}: Service/{name}: selector {sel} matches no pod "
                    "template")
            for port in spec.get("ports") or []:
                target = port.get("targetPort")
                if isinstance(target, str) and not any(
                        target in [p.get("name") for p in
                                   c.get("ports") or []]
                        for w in pods for _, c in containers(w)):
                    bad(f"{where}: Service/{name}: targetPort {target} is "
                        "no container port of its pods")
        elif kind == "HorizontalPodAutoscaler":
            ref = spec.get("scaleTargetRef") or {}
            if (ref.get("kind"), ref.get("name")) not in by:
                bad(f"{where}: HPA/{name}: target {ref.get('kind')}/"
                    f"{ref.get('name')} does not exist")
            if spec.get("minReplicas", 1) > spec.get("maxReplicas", 0):
                bad(f"{where}: HPA/{name}: minReplicas > maxReplicas")
        elif kind == "PodDisruptionBudget":
            sel = (spec.get("selector") or {}).get("matchLabels") or {}
            if not any(labels_match(sel, l) for _, l in templates):
                bad(f"{where}: PDB/{name}: selector {sel} matches no pod "
                    "template")
    index = by.get(("StatefulSet", "kvmesh-index"))
    config = configmaps.get("kvmesh-config", {})
    if index is not None and str(index["spec"].get("replicas", 1)) != \
            str(config.get("INDEX_SHARDS")):
        bad(f"{where}: StatefulSet/kvmesh-index has "
            f"{index['spec'].get('replicas', 1)} replicas but kvmesh-config "
            f"says INDEX_SHARDS {config.get('INDEX_SHARDS')}: pod "
            "kvmesh-index-I runs --shard I/INDEX_SHARDS, so they must agree")
    return by


def check_kvmesh_pod(o, tlabels, configmaps, where):
    """A kvmesh pod: entrypoint and role agree with its component, and
    Prometheus is told the port its container names metrics."""
    role = tlabels.get("app.kubernetes.io/component")
    if role not in ("agent", "router", "index"):
        return
    w = f"{where}: {o['kind']}/{o['metadata']['name']}"
    ann = o["spec"]["template"]["metadata"].get("annotations") or {}
    want = {"prometheus.io/scrape": "true", "prometheus.io/path": "/metrics"}
    for k, v in want.items():
        if ann.get(k) != v:
            bad(f"{w}: annotation {k} is {ann.get(k)!r}, want {v!r}")
    port = ann.get("prometheus.io/port")
    metrics_ports = [str(p["containerPort"]) for _, c in containers(o)
                     for p in c.get("ports") or [] if p.get("name") ==
                     "metrics"]
    if port is None or metrics_ports != [port]:
        bad(f"{w}: prometheus.io/port {port!r} is not its container port "
            f"named metrics {metrics_ports}")
    cfg = configmaps.get("kvmesh-config", {})
    if cfg.get("KVMESH_METRICS_PORT") not in (None, port):
        bad(f"{w}: KVMESH_METRICS_PORT {cfg.get('KVMESH_METRICS_PORT')} "
            f"differs from prometheus.io/port {port}")
    for _, c in containers(o):
        if c.get("command") != ["kvmesh-entrypoint"] or \
                (c.get("args") or [None])[0] != role:
            bad(f"{w}: container {c['name']} runs {c.get('command')} "
                f"{c.get('args')}, want kvmesh-entrypoint {role}")


def first_difference(a, b, path="."):
    if type(a) is not type(b):
        return f"{path}: {a!r} vs {b!r}"
    if isinstance(a, dict):
        for k in sorted(set(a) | set(b), key=str):
            if k not in a or k not in b:
                return f"{path}/{k}: only in " + \
                    ("the stand-in" if k in a else "kubectl")
            d = first_difference(a[k], b[k], f"{path}/{k}")
            if d:
                return d
        return None
    if isinstance(a, list):
        if len(a) != len(b):
            return f"{path}: {len(a)} items vs {len(b)}"
        for i, (x, y) in enumerate(zip(a, b)):
            d = first_difference(x, y, f"{path}[{i}]")
            if d:
                return d
        return None
    return None if a == b else f"{path}: {a!r} vs {b!r}"


def cmd_kustomize(args):
    use_kubectl = "--kubectl" in args
    dirs = [a for a in args if a != "--kubectl"]
    for d in dirs:
        try:
            objs = render(d)
        except (Unsupported, OSError, KeyError, yaml.YAMLError) as e:
            bad(f"{d}: the stand-in cannot render it: {e}")
            continue
        n = len(problems)
        mine = validate(objs, f"{d} (stand-in)")
        if use_kubectl:
            r = subprocess.run(["kubectl", "kustomize", d], text=True,
                               capture_output=True, timeout=120)
            if r.returncode != 0:
                bad(f"{d}: kubectl kustomize failed: {r.stderr.strip()}")
                continue
            real = validate([x for x in yaml.safe_load_all(r.stdout) if x],
                            f"{d} (kubectl kustomize)")
            for key in sorted(set(mine) | set(real)):
                if key not in mine or key not in real:
                    bad(f"{d}: {key[0]}/{key[1]} only in " +
                        ("the stand-in" if key in mine else "kubectl"))
                    continue
                diff = first_difference(mine[key], real[key])
                if diff:
                    bad(f"{d}: stand-in and kubectl differ on "
                        f"{key[0]}/{key[1]} at {diff}")
        if len(problems) == n:
            print(f"kustomize: {d}: {len(objs)} objects valid" +
                  (", kubectl kustomize renders the same" if use_kubectl
                   else " (stand-in renderer, not kubectl kustomize)"))
    return finish("kustomize")


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


# -- smoke: every deployment's command lines against the real binary ---------

def free_port():
    import socket
    with socket.socket() as so:
        so.bind(("127.0.0.1", 0))
        return so.getsockname()[1]


def systemd_exec(unit, env, instance):
    """The argv of a unit's ExecStart as systemd would run it: %i, %l,
    ${VAR} (one word) and $VAR (split on spaces) expanded."""
    with open(unit, encoding="utf-8") as f:
        text = re.sub(r"\\\n", " ", f.read())
    line = re.search(r"^ExecStart=(.*)$", text, re.M).group(1)
    import socket
    line = line.replace("%i", instance).replace(
        "%l", socket.gethostname().split(".")[0])
    argv = []
    for word in line.split():
        m = re.fullmatch(r"\$(\w+)", word)
        if m:
            argv += env.get(m.group(1), "").split()
        else:
            argv.append(re.sub(r"\$\{(\w+)\}",
                               lambda v: env.get(v.group(1), ""), word))
    return argv


def read_env_file(path):
    env = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if line and not line.startswith("#"):
                k, _, v = line.partition("=")
                env[k] = v
    return env


def cmd_smoke(args):
    """Starts a nats-server and, on it, the mesh of deploy/compose.yaml
    (prefix kvmesh), of the systemd units with kvmesh.env (prefix
    kvmesh-systemd) and of the Kubernetes dev overlay through
    kvmesh-entrypoint (prefix kvmesh-k8s); each must show its workers,
    routers and shards to `kvmesh admin` and route a request."""
    import shutil
    import signal
    import time
    binary, root = os.path.abspath(args[0]), os.path.abspath(args[1])
    deploy = os.path.join(root, "deploy")
    if not shutil.which("nats-server"):
        print("smoke: skip: no nats-server")
        return 77
    tmp = tempfile.mkdtemp(prefix="kvmesh-deploy-")
    procs = []

    def start(name, argv, env=None):
        log = open(os.path.join(tmp, name + ".log"), "w")
        p = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL,
                             env={**os.environ, **(env or {})})
        procs.append((name, p, log))

    def tail(name):
        with open(os.path.join(tmp, name + ".log")) as f:
            return " | ".join(f.read().strip().splitlines()[-3:])

    port = free_port()
    url = f"nats://127.0.0.1:{port}"
    try:
        start("nats-server", ["nats-server", "-a", "127.0.0.1", "-p",
                              str(port), "-js", "-sd",
                              os.path.join(tmp, "js")])
        # kvmesh processes exit when no server answers: on a loaded machine
        # nats-server takes a moment to listen.
        import socket
        deadline = time.monotonic() + 15
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), 0.2).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    print(f"smoke: nats-server does not listen on {port}: "
                          f"{tail('nats-server')}")
                    return 1
                time.sleep(0.05)
        expect = {}  # prefix: (workers, routers, shards)
        # compose: the kvmesh services `up` starts.
        with open(os.path.join(deploy, "compose.yaml")) as f:
            compose = yaml.safe_load(f)
        routers, workers, shards = set(), 0, 0
        for name, svc in compose["services"].items():
            cmd = svc.get("command") or []
            if not svc.get("image", "").startswith("kvmesh") or \
                    svc.get("profiles") or cmd[0] not in (
                        "agent", "router", "index"):
                continue
            argv = [binary] + [
                a.replace("nats://nats:4222", url).replace(
                    "/var/lib/kvmesh", os.path.join(tmp, "compose", name))
                for a in cmd]
            start("compose-" + name, argv)
            routers |= {flag(cmd, "--name")} if cmd[0] == "router" else set()
            workers += int(flag(cmd, "--workers") or 0)
            shards += cmd[0] == "index"
        expect["kvmesh"] = (workers, routers, shards)
        # systemd: the units with kvmesh.env, on their own prefix.
        env = read_env_file(os.path.join(deploy, "systemd", "kvmesh.env"))
        env.update(KVMESH_NATS_URL=url, KVMESH_NATS_PREFIX="kvmesh-systemd")
        units = os.path.join(deploy, "systemd")
        state = os.path.join(tmp, "systemd")
        runs = [("kvmesh-agent.service", ""), ("kvmesh-router.service", "")]
        runs += [("kvmesh-index@.service", str(i))
                 for i in range(int(env["INDEX_SHARDS"]))]
        routers = set()
        for unit, inst in runs:
            argv = [a.replace("/usr/local/bin/kvmesh", binary).replace(
                "/var/lib/kvmesh", state)
                for a in systemd_exec(os.path.join(units, unit), env, inst)]
            # EnvironmentFile: the process reads its KVMESH_* itself.
            start("systemd-" + unit.replace("@", "@" + inst), argv, env)
            if "router" in unit:
                routers.add(flag(argv, "--name"))
        expect["kvmesh-systemd"] = (int(env["KVMESH_AGENT_WORKERS"]), routers,
                                    int(env["INDEX_SHARDS"]))
        # Kubernetes: the dev overlay's ConfigMap through the entrypoint.
        objs = render(os.path.join(deploy, "kubernetes", "overlays", "dev"))
        config = next(o["data"] for o in objs if o["kind"] == "ConfigMap"
                      and o["metadata"]["name"] == "kvmesh-config")
        kenv = {k: str(v) for k, v in config.items()}
        kenv.update(KVMESH_NATS_URL=url, KVMESH_NATS_PREFIX="kvmesh-k8s",
                    KVMESH_BIN=binary)
        entry = os.path.join(deploy, "entrypoint.sh")
        # Pods have a network each; here they share one, so each its own
        # KVMESH_METRICS_PORT. name: (role, port), for the scrapes below.
        scrape = {}

        def pod(name, role, env):
            scrape[name] = (role, free_port())
            start(name, [entry, role], {**kenv, **env, "KVMESH_METRICS_PORT":
                                        str(scrape[name][1])})

        pod("k8s-router", "router", {"POD_NAME": "kvmesh-router-5d8c9-x2x4q"})
        for i in range(int(kenv["INDEX_SHARDS"])):
            pod(f"k8s-index-{i}", "index",
                {"POD_NAME": f"kvmesh-index-{i}",
                 "KVMESH_INDEX_DB": os.path.join(tmp, "k8s", f"index-{i}")})
        pod("k8s-agent", "agent", {"NODE_NAME": "dev"})
        expect["kvmesh-k8s"] = (int(kenv["KVMESH_AGENT_WORKERS"]),
                                {"kvmesh-router-5d8c9-x2x4q"},
                                int(kenv["INDEX_SHARDS"]))

        def admin(prefix, verb):
            r = subprocess.run([binary, "admin", "--nats", url, "--prefix",
                                prefix, "--json", "--timeout-ms", "2000",
                                verb], text=True, capture_output=True)
            return json.loads(r.stdout) if r.returncode == 0 else None

        for prefix, (nw, nr, ns) in expect.items():
            deadline = time.monotonic() + 60
            seen = None
            while True:
                dead = [(n, p.returncode) for n, p, _ in procs
                        if p.poll() is not None]
                if dead:
                    for n, rc in dead:
                        bad(f"{n} exited ({rc}): {tail(n)}")
                    return finish("smoke")
                w, r, sh = (admin(prefix, v) for v in
                            ("workers", "routers", "shards"))
                seen = (w, r, sh)
                if w and r and sh and \
                        sum(x["state"] == "live" for x in w["workers"]) == nw \
                        and {x["name"] for x in r["routers"]} == nr and \
                        len(sh["shards"]) == ns:
                    break
                if time.monotonic() > deadline:
                    bad(f"{prefix}: want {nw} live workers, routers {nr}, "
                        f"{ns} shards; admin shows {seen}")
                    break
                time.sleep(0.5)
            tokens = ",".join(str(i) for i in range(1, 1025))
            r = subprocess.run([binary, "route", "--nats", url, "--prefix",
                                prefix, "--block-tokens", "512", "--tokens",
                                tokens, "--json", "--timeout-ms", "10000"],
                               text=True,
                               capture_output=True)
            if r.returncode != 0:
                bad(f"{prefix}: route failed ({r.returncode}): "
                    f"{r.stderr.strip()}")
            else:
                print(f"smoke: {prefix}: {nw} workers, routers "
                      f"{sorted(nr)}, {ns} shards; routed a request")
        # The pods' metrics endpoints, as Prometheus scrapes them.
        import urllib.request
        for name, (role, mport) in sorted(scrape.items()):
            want = re.compile(r'kvmesh_build_info\{version="[^"]+",'
                              f'role="{role}"' r'\} 1$')
            try:
                with urllib.request.urlopen(
                        f"http://127.0.0.1:{mport}/metrics", timeout=10) as r:
                    page = r.read().decode()
                if not any(want.match(x) for x in page.splitlines()):
                    bad(f"{name}: /metrics on {mport} lacks "
                        f"kvmesh_build_info of role {role}")
            except OSError as e:
                bad(f"{name}: /metrics on {mport}: {e}; {tail(name)}")
        if not problems:
            print(f"smoke: kvmesh-k8s: {len(scrape)} pods serve /metrics")
        return finish("smoke")
    finally:
        for _, p, _ in reversed(procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        end = time.monotonic() + 10
        for _, p, log in reversed(procs):
            try:
                p.wait(max(0.1, end - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
            log.close()
        shutil.rmtree(tmp, ignore_errors=True)


def main(argv):
    commands = {"metrics": (cmd_metrics, 1, 1),
                "dashboard": (cmd_dashboard, 2, 2),
                "compose": (cmd_compose, 1, 1),
                "kustomize": (cmd_kustomize, 1, 99),
                "dockerfile": (cmd_dockerfile, 1, 2),
                "entrypoint": (cmd_entrypoint, 1, 1),
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
