"""deploy_check.py smoke: every deployment's command lines run against the
real binary and a real nats-server."""

import json
import os
import re
import subprocess
import tempfile
import yaml

from deploy_common import bad, finish, flag, problems
from kustomize_check import render


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
    routers and shards to `kvmesh admin`, route a request, and have its
    gateway hear the workers (/health) and answer /v1/models."""
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
        gateways = {}  # process name: its API's port
        # Gateways listen on a free loopback port here, not 8080, which
        # may be taken on a shared machine.

        def gateway_listen(name):
            gateways[name] = free_port()
            return f"127.0.0.1:{gateways[name]}"

        # compose: the kvmesh services `up` starts.
        with open(os.path.join(deploy, "compose.yaml")) as f:
            compose = yaml.safe_load(f)
        routers, workers, shards = set(), 0, 0
        for name, svc in compose["services"].items():
            cmd = svc.get("command") or []
            if not svc.get("image", "").startswith("kvmesh") or \
                    svc.get("profiles") or cmd[0] not in (
                        "agent", "router", "index", "gateway"):
                continue
            argv = [binary] + [
                a.replace("nats://nats:4222", url).replace(
                    "/var/lib/kvmesh", os.path.join(tmp, "compose", name))
                for a in cmd]
            if cmd[0] == "gateway":
                argv[argv.index("--listen") + 1] = gateway_listen(
                    "compose-" + name)
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
        runs = [("kvmesh-agent.service", ""), ("kvmesh-router.service", ""),
                ("kvmesh-gateway.service", "")]
        runs += [("kvmesh-index@.service", str(i))
                 for i in range(int(env["INDEX_SHARDS"]))]
        routers = set()
        for unit, inst in runs:
            argv = [a.replace("/usr/local/bin/kvmesh", binary).replace(
                "/var/lib/kvmesh", state)
                for a in systemd_exec(os.path.join(units, unit), env, inst)]
            # EnvironmentFile: the process reads its KVMESH_* itself.
            name = "systemd-" + unit.replace("@", "@" + inst)
            start(name, argv, {**env, "KVMESH_GATEWAY_LISTEN":
                               gateway_listen(name)} if "gateway" in unit
                  else env)
            if "router" in unit:
                routers.add(flag(argv, "--name"))
        expect["kvmesh-systemd"] = (int(env["KVMESH_AGENT_WORKERS"]), routers,
                                    int(env["INDEX_SHARDS"]))
        # Kubernetes: the dev overlay's ConfigMap through the entrypoint.
        objs = render((os.environ.get("KVMESH_KUBECTL") or "kubectl").split()
                      [:1], os.path.join(deploy, "kubernetes", "overlays",
                                         "dev"))
        if objs is None:
            return finish("smoke")
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
        pod("k8s-gateway", "gateway",
            {"POD_NAME": "kvmesh-gateway-6b7f9-k2m4x",
             "KVMESH_GATEWAY_LISTEN": gateway_listen("k8s-gateway")})
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
        # The gateways: ready once they hear a live worker, and serving the
        # OpenAI API (the simulated workers serve no model: an empty list).
        import urllib.request
        for name, gport in sorted(gateways.items()):
            deadline = time.monotonic() + 20
            while True:
                try:
                    with urllib.request.urlopen(
                            f"http://127.0.0.1:{gport}/health",
                            timeout=5) as r:
                        health = r.status
                    with urllib.request.urlopen(
                            f"http://127.0.0.1:{gport}/v1/models",
                            timeout=5) as r:
                        models = json.loads(r.read().decode())
                    if health == 200 and models.get("object") == "list":
                        print(f"smoke: {name}: ready, /v1/models answers")
                        break
                    bad(f"{name}: /v1/models is {models}")
                    break
                except (OSError, ValueError) as e:
                    if time.monotonic() > deadline:
                        bad(f"{name}: not ready on {gport}: {e}; "
                            f"{tail(name)}")
                        break
                    time.sleep(0.3)
        # The pods' metrics endpoints, as Prometheus scrapes them.
        for name, (role, mport) in sorted(scrape.items()):
            want = re.compile(r'kvmesh_build_info\{'
                              f'role="{role}"' r',version="[^"]+"\} 1$')
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
