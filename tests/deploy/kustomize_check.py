"""deploy_check.py kustomize and schema: each kustomization of
deploy/kubernetes rendered by the real `kubectl kustomize` (every kubectl
given must render the same objects), then checked for what the Kubernetes
schemas cannot say (selectors match their pods, what a pod refers to
exists, probes and Services reach served ports, the mesh's own rules), or
validated against those schemas (kubernetes-models, tests/npm)."""

import json
import os
import re
import subprocess
import yaml

from deploy_common import (DEFAULT_BLOCK_TOKENS, GATEWAY_LISTEN, bad, finish,
                           problems)


WORKLOADS = {"Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job"}


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
            # A probe on a port the container does not declare fails, or
            # probes whatever else listens there.
            served = {p.get("name") for p in c.get("ports") or []} | \
                {p.get("containerPort") for p in c.get("ports") or []}
            for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
                for how in ("httpGet", "tcpSocket", "grpc"):
                    port = ((c.get(probe) or {}).get(how) or {}).get("port")
                    if port is not None and port not in served:
                        bad(f"{cw}: {probe} {how} port {port} is none of "
                            "its container ports")
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
    check_nats(by, configmaps, templates, where)
    check_engine_pods(by, configmaps, where)
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
    of kvmesh has one, but a single NATS server (a budget would block
    every drain of its node)."""
    budgets = [((o["spec"].get("selector") or {}).get("matchLabels") or {})
               for (k, _), o in by.items() if k == "PodDisruptionBudget"]
    if not budgets:
        return
    for o, tlabels in templates:
        if o["kind"] not in ("Deployment", "StatefulSet") or \
                (tlabels.get("app.kubernetes.io/component") == "nats" and
                 o["spec"].get("replicas", 1) == 1):
            continue
        if not any(sel and labels_match(sel, tlabels) for sel in budgets):
            bad(f"{where}: {o['kind']}/{o['metadata']['name']} has no "
                "PodDisruptionBudget")


def nats_config(by, configmaps):
    """(StatefulSet kvmesh-nats, its nats container, the text of the config
    file its -c/--config names, the ConfigMap data beside it) or None where
    there is no such StatefulSet; the text is None where the server runs
    without a config file from a ConfigMap."""
    sts = by.get(("StatefulSet", "kvmesh-nats"))
    if sts is None:
        return None
    ps = sts["spec"]["template"]["spec"]
    c = next((c for c in ps.get("containers") or [] if c["name"] == "nats"),
             None)
    if c is None:
        return None
    args = [str(a) for a in c.get("args") or []]
    path = next((args[i + 1] for i, a in enumerate(args[:-1])
                 if a in ("-c", "--config")), None)
    if path is None:
        return sts, c, None, {}
    vols = {v["name"]: v for v in ps.get("volumes") or []}
    for m in c.get("volumeMounts") or []:
        cm = (vols.get(m["name"]) or {}).get("configMap", {}).get("name")
        d = m["mountPath"].rstrip("/") + "/"
        if cm and path.startswith(d):
            data = configmaps.get(cm) or {}
            return sts, c, data.get(path[len(d):]), data
    return sts, c, None, {}


def nats_routes(conf):
    """The host:port of each route of the config's cluster block."""
    m = re.search(r"\bcluster\s*\{(.*?)\n\}", conf, re.S)
    block = re.sub(r"#[^\n]*", "", m.group(1)) if m else ""
    r = re.search(r"\broutes\s*[:=]?\s*\[(.*?)\]", block, re.S)
    return re.findall(r"nats-route://([^\s,\]]+)|nats://([^\s,\]]+)",
                      r.group(1)) if r else []


def check_nats(by, configmaps, templates, where):
    """A NATS of several servers is one cluster: each server routes to
    every pod of the StatefulSet by its name in the headless Service, on
    the port the container and the Service declare, keeps JetStream on its
    volume, has a budget letting one server go at a time, and kvmesh's URL
    names the servers or their Service; durable records get more than one
    copy. Where the config includes auth.conf, each kvmesh container
    connects as its role's user, with the password the server takes from
    the same Secret."""
    found = nats_config(by, configmaps)
    if found is None:
        return
    sts, c, conf, _ = found
    n = sts["spec"].get("replicas", 1)
    svc = sts["spec"].get("serviceName")
    w = f"{where}: StatefulSet/kvmesh-nats"
    if n > 1:
        if conf is None:
            bad(f"{w}: {n} servers, but no config file of a ConfigMap: they "
                "form no cluster")
            return
        routes = {(a or b) for a, b in nats_routes(conf)}
        ports = {p["containerPort"] for p in c.get("ports") or []
                 if p.get("name") == "cluster"}
        want = {f"kvmesh-nats-{i}.{svc}:{p}" for i in range(n)
                for p in ports}
        if not ports:
            bad(f"{w}: container nats has no port named cluster")
        elif routes != want:
            bad(f"{w}: {n} servers, but its config's cluster routes are "
                f"{sorted(routes)}, want {sorted(want)}")
        # Where the config listens is where the container says it does.
        declared = {p.get("name"): p["containerPort"]
                    for p in c.get("ports") or []}
        m = re.search(r"\bcluster\s*\{(.*?)\n\}", conf, re.S)
        for what, name, text, pattern in (
                ("listen", "client", conf, r"^listen\s*[:=]\s*\S*?(\d+)\s*$"),
                ("http", "monitor", conf, r"^http\s*[:=]\s*\S*?(\d+)\s*$"),
                ("cluster listen", "cluster", m.group(1) if m else "",
                 r"^\s*listen\s*[:=]\s*\S*?(\d+)\s*$")):
            got = re.search(pattern, text, re.M)
            if not got or int(got.group(1)) != declared.get(name):
                bad(f"{w}: its config's {what} port is "
                    f"{got.group(1) if got else None}, its container's port "
                    f"{name} {declared.get(name)}")
        hs = by.get(("Service", svc)) or {}
        if not any(p.get("targetPort") == "cluster" for p in
                   (hs.get("spec") or {}).get("ports") or []):
            bad(f"{w}: headless Service {svc} has no port to cluster")
        if not re.search(r"^server_name\s*[:=]\s*\$POD_NAME\b", conf, re.M):
            bad(f"{w}: its config's server_name is not $POD_NAME (JetStream "
                "knows its peers by a unique, stable name)")
        store = re.search(r"\bstore_dir\s*[:=]\s*\"?([^\s\"]+)", conf)
        data = [m["mountPath"] for m in c.get("volumeMounts") or []
                if m["name"] in {t["metadata"]["name"] for t in
                                 sts["spec"].get("volumeClaimTemplates") or
                                 []}]
        if not store or not any(store.group(1).startswith(d.rstrip("/") + "/")
                                or store.group(1) == d for d in data):
            bad(f"{w}: JetStream's store_dir "
                f"{store.group(1) if store else None} is not on its volume "
                f"{data}")
        labels = sts["spec"]["template"]["metadata"].get("labels") or {}
        if not any(k == "PodDisruptionBudget" and
                   labels_match((o["spec"].get("selector") or {}).get(
                       "matchLabels") or {}, labels) and
                   o["spec"].get("maxUnavailable") == 1
                   for (k, _), o in by.items()):
            bad(f"{w}: no PodDisruptionBudget with maxUnavailable 1 keeps its "
                "majority through a drain")
        config = configmaps.get("kvmesh-config", {})
        hosts = [u.split("://")[-1].split("@")[-1].rsplit(":", 1)[0]
                 for u in str(config.get("KVMESH_NATS_URL", "")).split(",")]
        servers = {f"kvmesh-nats-{i}.{svc}" for i in range(n)}
        if set(hosts) != servers and hosts != ["kvmesh-nats"]:
            bad(f"{where}: KVMESH_NATS_URL names {hosts}, want the Service "
                f"kvmesh-nats or every server {sorted(servers)}")
        copies = int(config.get("KVMESH_ROUTER_DURABLE_REPLICAS", 1))
        if not 1 < copies <= n:
            bad(f"{where}: KVMESH_ROUTER_DURABLE_REPLICAS {copies} on {n} "
                f"NATS servers: want 2 to {n} copies, so that the durable "
                "queue outlives a server")
    if conf is None or not re.search(r"^include\s+\S*auth\.conf", conf,
                                     re.M):
        return
    secrets = {(e.get("secretRef") or {}).get("name")
               for e in c.get("envFrom") or []} - {None}
    for o, tlabels in templates:
        role = tlabels.get("app.kubernetes.io/component")
        for _, k in containers(o):
            if role not in ("agent", "router", "index", "gateway") or \
                    not k.get("image", "").split("/")[-1].startswith("kvmesh"):
                continue
            env = {e["name"]: e for e in k.get("env") or []}
            user = (env.get("KVMESH_NATS_USER") or {}).get("value")
            ref = ((env.get("KVMESH_NATS_PASSWORD") or {}).get("valueFrom")
                   or {}).get("secretKeyRef") or {}
            want_key = f"KVMESH_{role.upper()}_PASSWORD"
            if user != role or ref.get("key") != want_key or \
                    ref.get("name") not in secrets:
                bad(f"{where}: {o['kind']}/{o['metadata']['name']} container "
                    f"{k['name']} connects as {user!r} with password "
                    f"{ref.get('name')}/{ref.get('key')}, want user {role!r} "
                    f"and {want_key} of the Secret NATS takes "
                    f"({sorted(secrets)}): auth.conf refuses it otherwise")


def check_engine_pods(by, configmaps, where):
    """A pod of a vLLM engine and its agent: the engine has its GPU
    (requested and limited alike), publishes KV events where the agent
    reads them (endpoint, replay, topic, on localhost), and the agent
    fronts the engine's own port."""
    for (kind, name), o in by.items():
        cs = {c["name"]: c for _, c in containers(o)}
        vllm, agent = cs.get("vllm"), cs.get("agent")
        if not vllm or not agent:
            continue
        w = f"{where}: {kind}/{name}"
        res = vllm.get("resources") or {}
        gpus = [str((res.get(k) or {}).get("nvidia.com/gpu"))
                for k in ("requests", "limits")]
        if gpus[0] == "None" or gpus[0] != gpus[1]:
            bad(f"{w}: container vllm's nvidia.com/gpu requests {gpus[0]}, "
                f"limits {gpus[1]}: want a GPU, the same in both")
        args = [str(a) for a in vllm.get("args") or []]

        def arg(argv, flag_name):
            return argv[argv.index(flag_name) + 1] \
                if flag_name in argv[:-1] else None
        try:
            events = json.loads(arg(args, "--kv-events-config") or "{}")
        except ValueError as e:
            bad(f"{w}: vllm's --kv-events-config is no JSON: {e}")
            continue
        env = {e["name"]: str(e.get("value", "")) for e in
               agent.get("env") or []}
        aargs = (env.get("AGENT_ARGS") or "").split()
        port = lambda u: (u or "").rsplit(":", 1)[-1]  # noqa: E731
        want = {"--kv-events": events.get("endpoint"),
                "--kv-replay": events.get("replay_endpoint")}
        if not events.get("enable_kv_cache_events"):
            bad(f"{w}: vllm publishes no KV events (--kv-events-config "
                "enable_kv_cache_events)")
        for f, endpoint in want.items():
            got = arg(aargs, f)
            if not endpoint or not got or port(got) != port(endpoint) or \
                    "127.0.0.1" not in got:
                bad(f"{w}: agent's {f} {got} does not read vllm's "
                    f"{endpoint} on localhost")
        if arg(aargs, "--kv-topic") != events.get("topic"):
            bad(f"{w}: agent's --kv-topic {arg(aargs, '--kv-topic')} is not "
                f"vllm's topic {events.get('topic')}")
        engine = arg(aargs, "--engine-url")
        if port(engine) != arg(args, "--port"):
            bad(f"{w}: agent's --engine-url {engine} is not vllm's --port "
                f"{arg(args, '--port')}")
        front = arg(aargs, "--front-port")
        if front is None or int(front) not in {
                p["containerPort"] for p in agent.get("ports") or []
                if p.get("name") == "front"}:
            bad(f"{w}: agent's --front-port {front} is not its container "
                "port named front")


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
                return f"{path}/{k}: only in " + ("the first" if k in a
                                                  else "the second")
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


def parse_args(args):
    """(kubectls, dirs) from [--kubectl KUBECTL]... DIR...; kubectl from
    PATH when none is given."""
    kubectls, dirs = [], []
    it = iter(args)
    for a in it:
        if a == "--kubectl":
            kubectls.append(next(it, None) or "kubectl")
        else:
            dirs.append(a)
    return kubectls or ["kubectl"], dirs


def render(kubectls, d):
    """The objects `kubectl kustomize d` renders, each kubectl agreeing
    (kustomize's order of objects aside), or None after saying why not."""
    first = None
    for k in kubectls:
        try:
            r = subprocess.run([k, "kustomize", d], text=True,
                               capture_output=True, timeout=120)
        except OSError as e:
            bad(f"{d}: {k} cannot run: {e} (scripts/install-deps --tests "
                "installs kubernetes-client)")
            return None
        if r.returncode != 0:
            bad(f"{d}: {k} kustomize failed: {r.stderr.strip()}")
            return None
        objs = [x for x in yaml.safe_load_all(r.stdout) if x]
        keyed = {(o.get("kind"), (o.get("metadata") or {}).get("name")): o
                 for o in objs}
        if first is None:
            first = (k, objs, keyed)
            continue
        for key in sorted(set(first[2]) | set(keyed), key=str):
            if key not in first[2] or key not in keyed:
                bad(f"{d}: {key[0]}/{key[1]} rendered only by " +
                    (first[0] if key in first[2] else k))
                continue
            diff = first_difference(first[2][key], keyed[key])
            if diff:
                bad(f"{d}: {first[0]} and {k} render {key[0]}/{key[1]} "
                    f"differently at {diff}")
    return first[1]


def cmd_kustomize(args):
    kubectls, dirs = parse_args(args)
    for d in dirs:
        n = len(problems)
        objs = render(kubectls, d)
        if objs is None or len(problems) > n:
            continue
        validate(objs, d)
        if len(problems) == n:
            print(f"kustomize: {d}: {len(objs)} objects, rendered alike by "
                  f"{', '.join(kubectls)}, pass the checks")
    return finish("kustomize")


def cmd_schema(args):
    """Every rendered object validated against the Kubernetes OpenAPI
    schemas by tests/deploy/k8s_schema.mjs (kubernetes-models)."""
    kubectls, dirs = parse_args(args)
    here = os.path.dirname(os.path.abspath(__file__))
    npm = os.environ.get("KVMESH_NPM_MODULES") or os.path.join(
        here, "..", "npm", "node_modules")
    renderings = {}
    for d in dirs:
        objs = render(kubectls[:1], d)
        if objs is not None:
            renderings[d] = objs
    if problems:
        return finish("schema")
    try:
        r = subprocess.run(["node", os.path.join(here, "k8s_schema.mjs"),
                            npm], input=json.dumps(renderings), text=True,
                           capture_output=True, timeout=120)
    except OSError as e:
        bad(f"node cannot run: {e} (scripts/install-deps --tests installs "
            "Node.js)")
        return finish("schema")
    out = (r.stdout + r.stderr).strip()
    if r.returncode != 0:
        for line in out.splitlines():
            bad(line)
    elif out:
        print(f"schema: {out}")
    return finish("schema")


def cmd_nats(args):
    """The overlay's NATS configuration, as rendered: its auth.conf is the
    one given (deploy/nats/auth.conf), `nats-server -t` accepts it, and its
    servers, run here on loopback ports with the same file (addresses and
    directories rewritten), form one cluster with a JetStream leader and
    let auth.conf's users in, and no one else."""
    import shutil
    import socket
    import tempfile
    import time
    import urllib.request
    kubectls, rest = parse_args(args)
    overlay, auth = rest
    objs = render(kubectls[:1], overlay)
    if objs is None:
        return finish("nats")
    by = {(o["kind"], o["metadata"]["name"]): o for o in objs}
    configmaps = {n: o.get("data") or {} for (k, n), o in by.items()
                  if k == "ConfigMap"}
    found = nats_config(by, configmaps)
    if not found or found[2] is None:
        bad(f"{overlay}: StatefulSet/kvmesh-nats runs no config file of a "
            "ConfigMap")
        return finish("nats")
    sts, _, conf, files = found
    with open(auth, encoding="utf-8") as f:
        if files.get("auth.conf") != f.read():
            bad(f"{overlay}: the NATS ConfigMap's auth.conf differs from "
                f"{auth} (copy it again)")
    if not shutil.which("nats-server"):
        bad("no nats-server (scripts/install-deps installs it)")
        return finish("nats")
    n = sts["spec"].get("replicas", 1)
    names = [f"kvmesh-nats-{i}" for i in range(n)]
    passwords = {v: f"pw-{v.lower()}" for v in
                 re.findall(r"\$(KVMESH_[A-Z0-9_]+_PASSWORD)",
                            files.get("auth.conf", ""))}
    tmp = tempfile.mkdtemp(prefix="kvmesh-nats-")
    procs = []
    try:
        for name, text in files.items():
            with open(os.path.join(tmp, name), "w", encoding="utf-8") as f:
                f.write(text)
        env = {**os.environ, **passwords, "POD_NAME": names[0]}
        r = subprocess.run(["nats-server", "-t", "-c",
                            os.path.join(tmp, "nats.conf")], env=env,
                           text=True, capture_output=True, timeout=30)
        if r.returncode != 0:
            bad(f"{overlay}: nats-server -t refuses its nats.conf: "
                f"{(r.stdout + r.stderr).strip()}")
            return finish("nats")

        def free_port():
            with socket.socket() as so:
                so.bind(("127.0.0.1", 0))
                return so.getsockname()[1]
        ports = [(free_port(), free_port(), free_port()) for _ in names]
        routes = {(a or b) for a, b in nats_routes(conf)}
        for i, name in enumerate(names):
            client, http, cluster = ports[i]
            d = os.path.join(tmp, name)
            os.makedirs(d)
            text = conf
            for route in routes:
                host = route.split(".")[0]
                if host in names:
                    text = text.replace(
                        route, f"127.0.0.1:{ports[names.index(host)][2]}")
            text = re.sub(r"^listen:.*$", f"listen: 127.0.0.1:{client}",
                          text, flags=re.M)
            text = re.sub(r"^http:.*$", f"http: 127.0.0.1:{http}", text,
                          flags=re.M)
            text = re.sub(r"^(\s+)listen:\s*\S+:\d+$",
                          rf"\g<1>listen: 127.0.0.1:{cluster}", text,
                          flags=re.M)
            text = re.sub(r"\bstore_dir:.*$", f"store_dir: {d}/jetstream",
                          text, flags=re.M)
            text = re.sub(r"^pid_file:.*$", f"pid_file: {d}/nats.pid", text,
                          flags=re.M)
            # include is relative to the file: the ConfigMap's files beside.
            for fname, ftext in files.items():
                if fname != "nats.conf":
                    with open(os.path.join(d, fname), "w") as f:
                        f.write(ftext)
            with open(os.path.join(d, "nats.conf"), "w") as f:
                f.write(text)
            log = open(os.path.join(d, "log"), "w")
            procs.append(subprocess.Popen(
                ["nats-server", "-c", os.path.join(d, "nats.conf")],
                env={**env, "POD_NAME": name}, stdout=log,
                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL))
        # Each server: a JetStream meta leader elected among all of them.
        deadline = time.monotonic() + 30
        pending = set(range(n))
        while pending and time.monotonic() < deadline:
            for i in sorted(pending):
                try:
                    with urllib.request.urlopen(
                            f"http://127.0.0.1:{ports[i][1]}/jsz",
                            timeout=1) as r:
                        meta = json.load(r).get("meta_cluster") or {}
                    if meta.get("leader") in names and \
                            meta.get("cluster_size") == n:
                        pending.discard(i)
                except (OSError, ValueError):
                    pass
            time.sleep(0.2)
        for i in sorted(pending):
            with open(os.path.join(tmp, names[i], "log")) as f:
                logs = " | ".join(f.read().strip().splitlines()[-3:])
            bad(f"{overlay}: {names[i]} sees no JetStream leader of {n} "
                f"servers within 30 s: {logs}")

        if pending:
            return finish("nats")

        def connect(user, password, request=None):
            """The server's answer to CONNECT and PING as a user; with
            request (subject, payload), the reply to that request."""
            with socket.create_connection(("127.0.0.1", ports[-1][0]),
                                          5) as so:
                so.settimeout(10)
                f = so.makefile("rb")
                f.readline()  # INFO
                so.sendall(b"CONNECT " + json.dumps(
                    {"user": user, "pass": password, "verbose": False}
                ).encode() + b"\r\nPING\r\n")
                got = f.readline().decode().strip()
                if got != "PONG" or request is None:
                    return got
                subject, payload = request[0], json.dumps(request[1])
                so.sendall(f"SUB _INBOX.check 1\r\nPUB {subject} "
                           f"_INBOX.check {len(payload)}\r\n{payload}\r\n"
                           "PING\r\n".encode())
                while True:
                    line = f.readline().decode().strip()
                    if line.startswith("MSG "):
                        return f.read(int(line.split()[-1]) + 2).decode()
                    if line.startswith("-ERR") or not line:
                        return line
        users = re.findall(r"\{user:\s*(\w[\w-]*),\s*password:\s*\$(\w+)",
                           files.get("auth.conf", ""))
        try:
            for user, var in users:
                got = connect(user, passwords[var])
                if got != "PONG":
                    bad(f"{overlay}: user {user} of auth.conf is refused: "
                        f"{got}")
            got = connect(users[0][0] if users else "nobody", "wrong")
            if users and "Authorization Violation" not in got:
                bad(f"{overlay}: a wrong password is let in: {got}")
            # The routers' durable queue, in as many copies as the config
            # asks, created as the router user.
            copies = int(configmaps.get("kvmesh-config", {}).get(
                "KVMESH_ROUTER_DURABLE_REPLICAS", 1))
            router = dict(users).get("router")
            if router:
                got = connect("router", passwords[router], (
                    "$JS.API.STREAM.CREATE.KVMESH_ROUTE",
                    {"name": "KVMESH_ROUTE", "num_replicas": copies,
                     "subjects": ["kvmesh.route.durable.>"]}))
                reply = json.loads(got) if got.startswith("{") else {}
                if reply.get("error") or \
                        (reply.get("config") or {}).get("num_replicas") != \
                        copies:
                    bad(f"{overlay}: the router user cannot create the "
                        f"durable queue in {copies} copies: {got.strip()}")
        except (OSError, ValueError) as e:
            bad(f"{overlay}: talking to {names[-1]} failed: {e}")
        if not problems:
            print(f"nats: {overlay}: nats-server -t accepts it; {n} servers "
                  f"form one cluster with a JetStream leader; "
                  f"{len(users)} users of auth.conf get in, a wrong "
                  "password does not; the router user creates the durable "
                  f"queue in {copies} copies")
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(tmp, ignore_errors=True)
    return finish("nats")
