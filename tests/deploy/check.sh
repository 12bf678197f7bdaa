#!/bin/bash
# Checks deploy/ as far as a machine without a cluster, a Docker engine or a
# network allows: YAML lint, the compose file, Kustomize renderings (real
# `kubectl kustomize`) checked against the Kubernetes schemas and the
# mesh's rules, the production NATS cluster's configuration (nats-server
# -t, then its servers run on loopback ports), the dashboard's queries
# against docs/metrics.md, the systemd units (verified,
# sandboxed alike, their variables in kvmesh.env), the Dockerfile, the
# Kubernetes entrypoint, and (given the binary) every deployment's command
# lines run against a real nats-server. Each rule is also shown to catch a
# broken copy of the files.
# usage: check.sh SOURCE_ROOT [KVMESH_BINARY]
set -uo pipefail
root=$(cd "$1" && pwd)
bin=${2:-}
here=$root/tests/deploy
deploy=$root/deploy
# Debian's python3: the one with python3-yaml (yamllint depends on it).
py=/usr/bin/python3
[ -x "$py" ] || py=python3
check=("$py" "$here/deploy_check.py")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
passed=0 failed=0 skipped=0

# indent TEXT: TEXT with every line indented under its step's name.
indent() { printf '%s\n' "$1" | sed 's/^/     /'; }
ok() { echo "ok   $1"; passed=$((passed + 1)); }
skip() { echo "skip $1: $2"; skipped=$((skipped + 1)); }
fail() {
  echo "FAIL $1"
  indent "$2"
  failed=$((failed + 1))
}

# step NAME COMMAND...: ok when COMMAND exits 0 (its output shown), FAIL
# with its output otherwise; exit 77 means it could not run here.
step() {
  local name=$1 out rc=0
  shift
  out=$("$@" 2>&1) || rc=$?
  if [ "$rc" -eq 0 ]; then
    [ -z "$out" ] || indent "$out"
    ok "$name"
  elif [ "$rc" -eq 77 ]; then
    skip "$name" "$out"
  else
    fail "$name" "$out"
  fi
}

# must_fail NAME COMMAND...: the check itself is checked: COMMAND, given a
# broken input, has to fail.
must_fail() {
  local name=$1 out
  shift
  if out=$("$@" 2>&1); then
    fail "$name" "passed a broken input: $out"
  else
    ok "$name"
  fi
}

# must_say NAME SAYS COMMAND...: as must_fail, and COMMAND's output says
# SAYS (grep -E) of the broken input, so that it failed for that reason.
must_say() {
  local name=$1 says=$2 out
  shift 2
  if out=$("$@" 2>&1); then
    fail "$name" "passed a broken input: $out"
  elif ! grep -qE -- "$says" <<<"$out"; then
    fail "$name" "failed without saying /$says/: $out"
  else
    ok "$name"
  fi
}

if ! "$py" -c 'import yaml' 2>/dev/null; then
  fail python3_yaml "$py has no yaml module (Debian: python3-yaml)"
  echo "$passed passed, $failed failed, $skipped skipped"
  exit 1
fi

# -- YAML ---------------------------------------------------------------------
if command -v yamllint >/dev/null 2>&1; then
  step yamllint yamllint --strict -c "$deploy/.yamllint.yaml" "$deploy"
else
  fail yamllint "yamllint is not installed (scripts/install-deps installs it)"
fi

# -- compose ------------------------------------------------------------------
step compose_structure "${check[@]}" compose "$deploy/compose.yaml"
# A gateway whose port is not published must fail.
sed '/- "8080:8080"/d' "$deploy/compose.yaml" >"$tmp/compose.yaml"
must_say compose_catches_unpublished_gateway "port 8080 is not published" \
  "${check[@]}" compose "$tmp/compose.yaml"
# A gateway hashing in other blocks than the agents and routers must fail.
sed 's/"--block-tokens", "512"/"--block-tokens", "16"/' \
  "$deploy/compose.yaml" >"$tmp/compose.yaml"
must_say compose_catches_block_size_mismatch "block sizes differ" \
  "${check[@]}" compose "$tmp/compose.yaml"
if docker compose version >/dev/null 2>&1; then
  step compose_config docker compose -f "$deploy/compose.yaml" config -q
else
  skip compose_config "no docker compose plugin (the structural check ran)"
fi

# -- Kubernetes ---------------------------------------------------------------
# Every kustomization, rendered by the real `kubectl kustomize`: Debian 12's
# kubernetes-client (kubectl 1.20, Kustomize v2) in CI, or a newer kubectl.
# KVMESH_KUBECTL lists more kubectl binaries (space-separated) that must
# render the same objects, e.g. Debian's beside a newer one.
dirs=("$deploy/kubernetes/mesh" "$deploy/kubernetes/base"
  "$deploy"/kubernetes/overlays/*)
kube=()
for k in ${KVMESH_KUBECTL:-kubectl}; do kube+=(--kubectl "$k"); done
if command -v kubectl >/dev/null 2>&1 || [ -n "${KVMESH_KUBECTL:-}" ]; then
  step kustomize "${check[@]}" kustomize "${kube[@]}" "${dirs[@]}"
  # The schemas: every rendered object against the Kubernetes API's
  # OpenAPI schemas (kubernetes-models, tests/npm).
  step kubernetes_schema "${check[@]}" schema "${kube[@]}" "${dirs[@]}"
else
  fail kustomize "kubectl is not installed (scripts/install-deps --tests \
installs Debian's kubernetes-client)"
fi
# A field newer than Kustomize v2 (`patches`) must fail where Debian's
# kubectl renders.
debian_kubectl=""
for k in ${KVMESH_KUBECTL:-kubectl}; do
  if "$k" version --client 2>/dev/null | grep -q 'GitVersion:"v1\.20\.'; then
    debian_kubectl=$k
  fi
done
if [ -n "$debian_kubectl" ]; then
  rm -rf "$tmp/k8s-new-field" && cp -r "$deploy/kubernetes" "$tmp/k8s-new-field"
  sed -i 's/^patchesStrategicMerge:$/patches:/; s/^  - config.yaml$/  - path: config.yaml/' \
    "$tmp/k8s-new-field/overlays/vllm/kustomization.yaml"
  must_say kustomize_catches_field_debian_lacks "kustomize failed" \
    "${check[@]}" kustomize "${kube[@]}" "$tmp/k8s-new-field/overlays/vllm"
else
  skip kustomize_catches_field_debian_lacks "no kubectl 1.20 (Debian 12's \
kubernetes-client) among ${KVMESH_KUBECTL:-kubectl}"
fi
# An overlay whose shard count disagrees with its StatefulSet must fail.
cp -r "$deploy/kubernetes" "$tmp/k8s"
sed -i 's/INDEX_SHARDS: "1"/INDEX_SHARDS: "3"/' \
  "$tmp/k8s/overlays/dev/config.yaml"
must_fail kustomize_catches_shard_mismatch \
  "${check[@]}" kustomize "${kube[@]}" "$tmp/k8s/overlays/dev"
# break_k8s NAME DIR SAYS FILE SED-SCRIPT: a fresh copy of
# deploy/kubernetes with FILE (below it) edited by SED-SCRIPT; the check of
# its kustomization DIR must then fail, and say SAYS (grep -E) of it.
break_k8s() {
  local dir=$tmp/k8s-$1
  rm -rf "$dir" && cp -r "$deploy/kubernetes" "$dir"
  sed -i "$5" "$dir/$4"
  must_say "kustomize_catches_$1" "$3" "${check[@]}" kustomize "${kube[@]}" \
    "$dir/$2"
}
# The gateway probed on its API's /health instead of its own /readyz.
break_k8s gateway_probe overlays/dev \
  "Deployment/kvmesh-gateway: container gateway's readinessProbe" \
  mesh/gateway.yaml 's#path: /readyz#path: /health#'
# Gateways hashing in other blocks than vLLM's.
break_k8s block_size_mismatch overlays/vllm "block sizes differ" \
  overlays/vllm/config.yaml '/KVMESH_GATEWAY_BLOCK_TOKENS/d'
# The gateway's disruption budget gone (the file's third object: the
# file ends at its second ---).
break_k8s missing_budget overlays/production \
  "Deployment/kvmesh-gateway has no PodDisruptionBudget" \
  overlays/production/pdb.yaml '/^---$/{x;s/$/x/;/^xx$/Q;x}'
# The gateway listening on another port than its container's.
break_k8s gateway_port overlays/dev "listens on 0.0.0.0:8081" \
  mesh/gateway.yaml 's#value: 0.0.0.0:8080#value: 0.0.0.0:8081#'
# No gateway at all.
break_k8s missing_gateway base "no Deployment and Service kvmesh-gateway" \
  mesh/kustomization.yaml '/gateway.yaml/d'
# An engine probed on a port its container does not declare.
break_k8s probe_port overlays/vllm "readinessProbe httpGet port htpp" \
  overlays/vllm/vllm.yaml 's/port: http$/port: htpp/'
# An agent reading KV events' replay on another port than vLLM serves it.
break_k8s engine_replay overlays/vllm \
  "agent's --kv-replay tcp://127.0.0.1:5601 does not read vllm's" \
  overlays/vllm/vllm.yaml 's#--kv-replay tcp://127.0.0.1:5600#--kv-replay tcp://127.0.0.1:5601#'
# An engine whose GPU is requested but not limited.
break_k8s engine_gpu overlays/vllm "container vllm's nvidia.com/gpu requests 1, limits None" \
  overlays/vllm/vllm.yaml '/limits:/,/nvidia.com\/gpu/{/nvidia.com\/gpu/d}'
# A NATS cluster grown to 4 servers whose routes still name 3.
break_k8s nats_routes overlays/production "its config's cluster routes are" \
  overlays/production/nats.yaml 's/^  replicas: 3$/  replicas: 4/'
# The NATS cluster's disruption budget gone (pdb.yaml's last object).
break_k8s nats_budget overlays/production \
  "no PodDisruptionBudget with maxUnavailable 1" \
  overlays/production/pdb.yaml '/^# The NATS cluster keeps/,$d'
# A server listening for routes on another port than its container's.
break_k8s nats_cluster_port overlays/production \
  "config's cluster listen port is 6223, its container's port cluster 6222" \
  overlays/production/nats/nats.conf 's/listen: 0.0.0.0:6222/listen: 0.0.0.0:6223/'
# A gateway connecting as another role's user.
break_k8s nats_user overlays/production \
  "kvmesh-gateway container gateway connects as 'client'" \
  overlays/production/gateway.yaml 's/value: gateway$/value: client/'

# break_schema NAME DIR SAYS FILE SED-SCRIPT: as break_k8s, for the schema
# validation.
break_schema() {
  local dir=$tmp/schema-$1
  rm -rf "$dir" && cp -r "$deploy/kubernetes" "$dir"
  sed -i "$5" "$dir/$4"
  must_say "kubernetes_schema_catches_$1" "$3" "${check[@]}" schema \
    "${kube[@]}" "$dir/$2"
}
# A port quoted into a string.
break_schema string_port base \
  "Deployment/kvmesh-router: .spec/template/spec/containers/0/ports/0/containerPort must be integer" \
  mesh/router.yaml 's/containerPort: 9464/containerPort: "9464"/'
# A quantity Kubernetes cannot parse.
break_schema bad_quantity overlays/production \
  "Deployment/kvmesh-gateway: .*memory must match format \"quantity\"" \
  overlays/production/gateway.yaml 's/memory: 1Gi/memory: 1 GiB/'
# A Service port without its number.
break_schema missing_port overlays/dev \
  "Service/kvmesh-gateway: .spec/ports/0 must have required property port" \
  mesh/gateway.yaml '/^      port: 8080$/d'

# -- the production overlay's NATS cluster ----------------------------------
# Its configuration as rendered: nats-server -t, then its 3 servers on
# loopback ports form a cluster, auth.conf's users get in and the router
# user creates the durable queue in 3 copies.
step nats_cluster "${check[@]}" nats "${kube[@]}" \
  "$deploy/kubernetes/overlays/production" "$deploy/nats/auth.conf"
# break_nats NAME SAYS FILE SED-SCRIPT: as break_k8s, for that check.
break_nats() {
  local dir=$tmp/nats-$1
  rm -rf "$dir" && cp -r "$deploy/kubernetes" "$dir"
  sed -i "$4" "$dir/$3"
  must_say "nats_cluster_catches_$1" "$2" "${check[@]}" nats "${kube[@]}" \
    "$dir/overlays/production" "$deploy/nats/auth.conf"
}
# A setting nats-server cannot parse.
break_nats invalid_config "nats-server -t refuses its nats.conf" \
  overlays/production/nats/nats.conf 's/^lame_duck_duration: 30s$/lame_duck_duration: thirty/'
# The overlay's copy of auth.conf behind deploy/nats/auth.conf.
break_nats stale_auth "auth.conf differs from" \
  overlays/production/nats/auth.conf '$a # edited'
# More copies of the durable queue than servers.
break_nats too_many_copies "cannot create the durable queue in 4 copies" \
  overlays/production/config.yaml 's/DURABLE_REPLICAS: "3"/DURABLE_REPLICAS: "4"/'

# -- Grafana ------------------------------------------------------------------
step dashboard_metrics "${check[@]}" dashboard "$deploy/grafana/kvmesh.json" \
  "$root/docs/metrics.md"
# A misspelt series must fail the check.
sed 's/kvmesh_router_decisions_total/kvmesh_router_decisons_total/' \
  "$deploy/grafana/kvmesh.json" >"$tmp/misspelt.json"
must_fail dashboard_catches_unknown_series \
  "${check[@]}" dashboard "$tmp/misspelt.json" "$root/docs/metrics.md"

# -- systemd ------------------------------------------------------------------
# verify also wants ExecStart's binary to exist: point it at a stand-in, so
# that the units are checked on machines without kvmesh installed.
if command -v systemd-analyze >/dev/null 2>&1; then
  mkdir -p "$tmp/systemd"
  printf '#!/bin/sh\n' >"$tmp/kvmesh" && chmod +x "$tmp/kvmesh"
  for unit in "$deploy"/systemd/*.service; do
    sed "s#/usr/local/bin/kvmesh#$tmp/kvmesh#" "$unit" \
      >"$tmp/systemd/$(basename "$unit")"
  done
  # verify exits 0 on some problems it only warns about: any output fails.
  if out=$(cd "$tmp/systemd" && systemd-analyze verify ./*.service 2>&1) &&
    [ -z "$out" ]; then
    ok systemd_verify
  else
    fail systemd_verify "$out"
  fi
else
  skip systemd_verify "no systemd-analyze"
fi
step systemd_units "${check[@]}" systemd "$deploy/systemd/kvmesh.env" \
  "$deploy"/systemd/*.service
# A unit less sandboxed than the others, or one whose ExecStart names a
# variable kvmesh.env lacks, must fail.
sed '/^ProtectSystem=strict$/d' "$deploy/systemd/kvmesh-gateway.service" \
  >"$tmp/kvmesh-gateway.service"
must_say systemd_catches_missing_sandboxing "lacks ProtectSystem=strict" \
  "${check[@]}" systemd "$deploy/systemd/kvmesh.env" "$tmp/kvmesh-gateway.service"
sed '/^GATEWAY_ARGS=/d' "$deploy/systemd/kvmesh.env" >"$tmp/kvmesh.env"
must_say systemd_catches_missing_env_key 'uses \$GATEWAY_ARGS' \
  "${check[@]}" systemd "$tmp/kvmesh.env" "$deploy"/systemd/*.service

# -- the image and its entrypoint ---------------------------------------------
step dockerfile "${check[@]}" dockerfile "$deploy/Dockerfile" ${bin:+"$bin"}
step entrypoint "${check[@]}" entrypoint "$deploy/entrypoint.sh"
if command -v shellcheck >/dev/null 2>&1; then
  step entrypoint_shellcheck shellcheck "$deploy/entrypoint.sh"
else
  skip entrypoint_shellcheck "no shellcheck"
fi

# -- the command lines, run -----------------------------------------------------
if [ -n "$bin" ]; then
  step smoke "${check[@]}" smoke "$bin" "$root"
else
  skip smoke "no kvmesh binary given"
fi

echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
