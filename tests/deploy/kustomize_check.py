"""deploy_check.py kustomize: renders each kustomization of deploy/kubernetes
with a stand-in (resources, patches, replicas, images: what deploy/kubernetes
uses; Debian 12 packages no kubectl) and validates the objects."""

import os
import re
import subprocess
import yaml

from deploy_common import (DEFAULT_BLOCK_TOKENS, GATEWAY_LISTEN, bad, finish,
                           problems)


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
    check_gateway(by, configmaps, where)
    check_budgets(by, templates, where)
    check_block_sizes(by, configmaps.get("kvmesh-config", {}), where)
    index = by.get(("StatefulSet", "kvmesh-index"))
    config = configmaps.get("kvmesh-config", {})
    if index is not None and str(index["spec"].get("replicas", 1)) != \
            str(config.get("INDEX_SHARDS")):
        bad(f"{where}: StatefulSet/kvmesh-index has "
            f"{index['spec'].get('replicas', 1)} replicas but kvmesh-config "
            f"says INDEX_SHARDS {config.get('INDEX_SHARDS')}: pod "
            "kvmesh-index-I runs --shard I/INDEX_SHARDS, so they must agree")
    return by


def env_value(c, configmaps, name):
    """What variable `name` is in container `c`: its env, else the
    ConfigMaps it takes whole (envFrom), else None."""
    for e in c.get("env") or []:
        if e.get("name") == name and "value" in e:
            return str(e["value"])
    for e in c.get("envFrom") or []:
        cm = (e.get("configMapRef") or {}).get("name")
        if name in configmaps.get(cm, {}):
            return str(configmaps[cm][name])
    return None


def check_gateway(by, configmaps, where):
    """Wherever routers run, the gateway runs too: a Deployment with an
    autoscaler, and a Service whose port reaches the API the process
    listens on (KVMESH_GATEWAY_LISTEN)."""
    if ("Deployment", "kvmesh-router") not in by:
        return
    dep = by.get(("Deployment", "kvmesh-gateway"))
    svc = by.get(("Service", "kvmesh-gateway"))
    if dep is None or svc is None:
        bad(f"{where}: routers but no Deployment and Service kvmesh-gateway")
        return
    if not any(k == "HorizontalPodAutoscaler" and
               (o["spec"].get("scaleTargetRef") or {}).get("name") ==
               "kvmesh-gateway" for (k, _), o in by.items()):
        bad(f"{where}: no HorizontalPodAutoscaler scales kvmesh-gateway")
    for _, c in containers(dep):
        listen = env_value(c, configmaps, "KVMESH_GATEWAY_LISTEN") or \
            GATEWAY_LISTEN
        port = listen.rsplit(":", 1)[-1]
        http = [str(p["containerPort"]) for p in c.get("ports") or []
                if p.get("name") == "http"]
        if http != [port]:
            bad(f"{where}: Deployment/kvmesh-gateway container {c['name']} "
                f"listens on {listen}, its port named http is {http}")
    if not any(p.get("targetPort") == "http"
               for p in svc["spec"].get("ports") or []):
        bad(f"{where}: Service/kvmesh-gateway has no port to http")


def check_budgets(by, templates, where):
    """Where disruption budgets are set, every Deployment and StatefulSet
    of kvmesh but NATS (a single server: a budget would block every drain
    of its node) has one."""
    budgets = [((o["spec"].get("selector") or {}).get("matchLabels") or {})
               for (k, _), o in by.items() if k == "PodDisruptionBudget"]
    if not budgets:
        return
    for o, tlabels in templates:
        if o["kind"] not in ("Deployment", "StatefulSet") or \
                tlabels.get("app.kubernetes.io/component") == "nats":
            continue
        if not any(sel and labels_match(sel, tlabels) for sel in budgets):
            bad(f"{where}: {o['kind']}/{o['metadata']['name']} has no "
                "PodDisruptionBudget")


def check_block_sizes(by, config, where):
    """One block size (rule 4): agents', routers' and gateways' from
    kvmesh-config, and an engine's --block-size beside them."""
    sizes = {role: str(config.get(f"KVMESH_{role.upper()}_BLOCK_TOKENS",
                                  DEFAULT_BLOCK_TOKENS))
             for role in ("agent", "router", "gateway")}
    for (kind, name), o in by.items():
        for _, c in containers(o):
            args = [str(a) for a in c.get("args") or []]
            if "--block-size" in args[:-1]:
                sizes[f"{kind}/{name} {c['name']}"] = \
                    args[args.index("--block-size") + 1]
    if len(set(sizes.values())) > 1:
        bad(f"{where}: block sizes differ (rule 4): {sizes}")


def check_kvmesh_pod(o, tlabels, configmaps, where):
    """A kvmesh pod: entrypoint and role agree with its component,
    Prometheus is told the port its container names metrics, and the
    kubelet probes /readyz and /healthz there."""
    role = tlabels.get("app.kubernetes.io/component")
    if role not in ("agent", "router", "index", "gateway"):
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
    # kvmesh's own containers (an engine may run beside the agent).
    for _, c in containers(o):
        if not c.get("image", "").split("/")[-1].startswith("kvmesh"):
            continue
        if c.get("command") != ["kvmesh-entrypoint"] or \
                (c.get("args") or [None])[0] != role:
            bad(f"{w}: container {c['name']} runs {c.get('command')} "
                f"{c.get('args')}, want kvmesh-entrypoint {role}")
        # The process's own probes, on its metrics port.
        for probe, path in (("readinessProbe", "/readyz"),
                            ("livenessProbe", "/healthz")):
            get = (c.get(probe) or {}).get("httpGet") or {}
            if get.get("path") != path or get.get("port") != "metrics":
                bad(f"{w}: container {c['name']}'s {probe} is {get or None}, "
                    f"want GET {path} on port metrics")


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
