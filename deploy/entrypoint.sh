#!/bin/sh
# kvmesh-entrypoint: a kvmesh process's command line from its pod's
# environment, for Kubernetes (deploy/kubernetes), where one manifest serves
# every replica and only the environment tells them apart.
#
# usage: kvmesh-entrypoint agent|router|index|gateway [MORE KVMESH FLAGS...]
#        kvmesh-entrypoint ANYTHING ELSE...   (runs `kvmesh ANYTHING ELSE...`)
#
# kvmesh itself reads KVMESH_* variables (docs/config.md): KVMESH_NATS_URL,
# KVMESH_NATS_PREFIX, KVMESH_METRICS_PORT, KVMESH_LOG_FORMAT, any
# KVMESH_ROUTER_*, KVMESH_AGENT_*, KVMESH_INDEX_*, KVMESH_GATEWAY_* key, and
# KVMESH_CONFIG, a TOML file. This script adds only what differs per pod,
# from the pod:
#
# Environment (the ConfigMap kvmesh-config sets most of it):
#   KVMESH_NATS_URL   NATS server URL(s), comma-separated (required, unless
#                     KVMESH_CONFIG names a file with nats.url)
#   router: POD_NAME  the router's --name (unique per pod)       (hostname)
#           ROUTER_ARGS  more router flags, split on spaces
#   gateway: POD_NAME  the gateway's --name (unique per pod)     (hostname)
#           GATEWAY_ARGS  more gateway flags
#   index:  POD_NAME  StatefulSet pod name NAME-I: shard I      (hostname)
#           INDEX_SHARDS  N, the StatefulSet's replicas          (required)
#           KVMESH_INDEX_DB  RocksDB directory  (/var/lib/kvmesh/index)
#           INDEX_ARGS   more index flags
#   agent:  KVMESH_AGENT_WORKERS  GPUs (WORKERs) of this node, or a real
#                             engine's data-parallel ranks    (required)
#           KVMESH_AGENT_ENGINE   --engine: sim, or vllm|sglang (the agent
#                             beside an engine, --data-parallel-size)  (sim)
#           KVMESH_AGENT_WORKER_ID  this node's first worker id; when
#                             unset: with WORKER_IDS=ordinal (a StatefulSet
#                             of engine pods) POD_NAME's ordinal times
#                             KVMESH_AGENT_WORKERS, else the line for
#                             NODE_NAME in WORKER_ID_MAP
#           NODE_NAME         the node the pod runs on (downward API)
#           WORKER_ID_MAP     file of "NODE FIRST_ID [WORKERS]" lines
#                             (/etc/kvmesh/worker-ids)
#           AGENT_ARGS   more agent flags
#
# Worker ids must be unique across the mesh: two agents claiming one id make
# the routers' stand-in for it flip between them. A DaemonSet's pods have no
# ordinal, so each node's range comes from a map the operator keeps; a node
# missing from it, or overlapping another, stops the pod with a message
# rather than joining with guessed ids.
set -eu

die() {
  echo "kvmesh-entrypoint: $*" >&2
  exit 2
}

# A decimal number of at most 9 digits (the shell's arithmetic is safe).
is_count() {
  case $1 in
    '' | *[!0-9]*) return 1 ;;
  esac
  [ ${#1} -le 9 ]
}

is_positive() {
  is_count "$1" && [ "$1" -ge 1 ]
}

kvmesh=${KVMESH_BIN:-kvmesh}
[ $# -ge 1 ] ||
  die "usage: kvmesh-entrypoint agent|router|index|gateway [FLAG...]"
role=$1
shift

case $role in
  agent | router | index | gateway) ;;
  *) exec "$kvmesh" "$role" "$@" ;;
esac

[ -n "${KVMESH_NATS_URL:-}" ] || [ -n "${KVMESH_CONFIG:-}" ] ||
  die "$role: KVMESH_NATS_URL is not set (the ConfigMap kvmesh-config sets" \
    "it; or KVMESH_CONFIG names a config file with nats.url)"
pod=${POD_NAME:-$(hostname)}
extra=

case $role in
  router)
    set -- router --name "$pod" "$@"
    extra=${ROUTER_ARGS:-}
    ;;
  gateway)
    set -- gateway --name "$pod" "$@"
    extra=${GATEWAY_ARGS:-}
    ;;
  index)
    shards=${INDEX_SHARDS:-}
    is_positive "$shards" ||
      die "index: INDEX_SHARDS is '$shards', want the shard count N >= 1"
    ordinal=${pod##*-}
    is_count "$ordinal" ||
      die "index: pod name '$pod' does not end in -I (a StatefulSet ordinal)"
    [ "$ordinal" -lt "$shards" ] ||
      die "index: pod $pod is shard $ordinal but INDEX_SHARDS is $shards:" \
        "the StatefulSet's replicas and INDEX_SHARDS must be equal"
    export KVMESH_INDEX_DB="${KVMESH_INDEX_DB:-/var/lib/kvmesh/index}"
    set -- index --shard "$ordinal/$shards" "$@"
    extra=${INDEX_ARGS:-}
    ;;
  agent)
    workers=${KVMESH_AGENT_WORKERS:-}
    is_positive "$workers" ||
      die "agent: KVMESH_AGENT_WORKERS is '$workers', want the node's GPU" \
        "count"
    first=${KVMESH_AGENT_WORKER_ID:-}
    if [ -z "$first" ] && [ "${WORKER_IDS:-}" = ordinal ]; then
      ordinal=${pod##*-}
      is_count "$ordinal" ||
        die "agent: WORKER_IDS=ordinal, but pod name '$pod' does not end" \
          "in -I (a StatefulSet ordinal)"
      first=$((ordinal * workers))
    fi
    if [ -z "$first" ]; then
      map=${WORKER_ID_MAP:-/etc/kvmesh/worker-ids}
      node=${NODE_NAME:-}
      [ -n "$node" ] ||
        die "agent: neither KVMESH_AGENT_WORKER_ID nor NODE_NAME set"
      [ -r "$map" ] || die "agent: cannot read the worker id map $map"
      # One pass: this node's line, and every pair of ranges that overlap.
      found=$(awk -v node="$node" -v dflt="$workers" '
        /^[ \t]*(#|$)/ { next }
        {
          if ($2 !~ /^[0-9]+$/ || (NF > 2 && $3 !~ /^[1-9][0-9]*$/)) {
            print "bad line " NR ": " $0; exit
          }
          n = NF > 2 ? $3 : dflt
          if ($1 in lo) { print "node " $1 " is listed twice"; exit }
          for (k in lo)
            if ($2 + 0 < hi[k] && lo[k] < $2 + n) {
              print "nodes " k " and " $1 " share worker ids"; exit
            }
          lo[$1] = $2 + 0; hi[$1] = $2 + n
          if ($1 == node) mine = $2 " " n
        }
        END { if (mine != "") print "ok " mine }' "$map")
      case $found in
        "ok "*) ;;
        "")
          die "agent: node $node has no line in $map (ConfigMap" \
            "kvmesh-worker-ids): add '$node FIRST_ID' whose range of" \
            "$workers ids overlaps no other node's, then delete this pod"
          ;;
        *) die "agent: $map: $found" ;;
      esac
      found=${found#ok }
      first=${found% *}
      workers=${found#* }
    fi
    is_count "$first" || die "agent: first worker id '$first' is not a number"
    export KVMESH_AGENT_ENGINE="${KVMESH_AGENT_ENGINE:-sim}"
    if [ "$KVMESH_AGENT_ENGINE" = sim ]; then
      set -- agent --workers "$workers" --worker-id "$first" "$@"
    else
      # One worker per rank; the pod's name names the agent.
      set -- agent --data-parallel-size "$workers" --worker-id "$first" \
        --name "$pod" "$@"
    fi
    extra=${AGENT_ARGS:-}
    ;;
esac

# The *_ARGS variables are flag lists: split on spaces, no globbing.
set -f
# shellcheck disable=SC2086
set -- "$@" $extra
set +f
echo "kvmesh-entrypoint: $kvmesh $*" >&2
exec "$kvmesh" "$@"
