#!/bin/bash
# NATS credentials, TLS and subject permissions on real nats-servers: a mesh
# whose every process has its role's user from deploy/nats/auth.conf, what
# each role is refused, wrong credentials, token (through `kvmesh up` to its
# children), nkey, creds (operator-mode JWTs made by nats_auth.py), and TLS
# with certificates made here by openssl.
# usage: security_test.sh KVMESH_BINARY SOURCE_ROOT
set -euo pipefail
bin=$1
root=$(cd "$2" && pwd)
fails=0
tmp=$(mktemp -d)
pids=() # every process this script starts, stopped at exit

. "$(dirname "$0")/lib.sh"

# expect NAME RC PATTERN: the last run exited RC (any non-zero for "fail")
# and its stderr matches PATTERN (grep -E).
expect() {
  local name=$1 want=$2 pattern=$3
  if [ "$want" = fail ] && [ "$rc" -eq 0 ]; then
    fail "$name" "exit 0, want an error: $out"
  elif [ "$want" != fail ] && [ "$rc" -ne "$want" ]; then
    fail "$name" "exit $rc, want $want: $err"
  elif ! grep -qE -- "$pattern" <<<"$err"; then
    fail "$name" "stderr does not say /$pattern/: $err"
  else
    ok "$name"
  fi
}

# serve NAME CONFIG: starts nats-server -c CONFIG (which listens on $port)
# and waits until it accepts connections.
serve() {
  nats-server -c "$2" -l "$tmp/$1.log" &
  pids+=($!)
  local end=$((SECONDS + 10))
  # Its own log says it is ready: a listener on $port alone could be
  # another test's server that took the same free port first.
  until (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null &&
    grep -q "Server is ready" "$tmp/$1.log" 2>/dev/null; do
    if [ "$SECONDS" -ge "$end" ]; then
      echo "FAIL nats-server $1 did not start: $(tail -5 "$tmp/$1.log")"
      exit 1
    fi
    sleep 0.1
  done
}

prompt=$(seq -s, 1 64)

# -- the mesh with a user per role (deploy/nats/auth.conf) --------------------

for role in CLIENT AGENT ROUTER INDEX GATEWAY ADMIN MONITOR; do
  export "KVMESH_${role}_PASSWORD=pw-$role-$RANDOM$RANDOM"
done
# The shipped file is the generator's output, word for word.
if "$bin" config nats-auth | cmp -s - "$root/deploy/nats/auth.conf"; then
  ok auth_conf_generated
else
  fail auth_conf_generated "deploy/nats/auth.conf differs from kvmesh config nats-auth"
fi
# A name that cannot be a subject token is a usage error, named.
rc=0
err=$("$bin" config nats-auth --agent "node a" 2>&1 >/dev/null) || rc=$?
case "$rc:$err" in
  "2:"*"node a"*) ok auth_conf_bad_agent_name ;;
  *) fail auth_conf_bad_agent_name "exit $rc: $err" ;;
esac
# Agents node-a and node-b get users of their own, the others the shared one.
"$bin" config nats-auth --agent node-a --agent node-b --shared-agent \
  >"$tmp/auth.conf"
# Two clients that cannot read their durable answers: one without the
# decisions bucket (as auth.conf once was), one without its inboxes.
export KVMESH_NOBUCKET_PASSWORD=pw-nobucket-$RANDOM$RANDOM
export KVMESH_NOINBOX_PASSWORD=pw-noinbox-$RANDOM$RANDOM
export KVMESH_AGENT_NODE_A_PASSWORD=pw-node-a-$RANDOM$RANDOM
export KVMESH_AGENT_NODE_B_PASSWORD=pw-node-b-$RANDOM$RANDOM
python3 - "$tmp/auth.conf" <<'EOF'
import re, sys
path = sys.argv[1]
text = open(path).read()
client = re.search(r"\n  CLIENT = \{.*?\n  \}\n", text, re.S).group(0)
nobucket = re.sub(r',\s*"\$JS\.API\.(STREAM\.INFO|DIRECT\.GET)\.KV_[^"]*"', "",
                  client.replace("CLIENT", "NOBUCKET"))
noinbox = client.replace("CLIENT", "NOINBOX").replace(
    'deny = ["_INBOX.kvmesh.>"]',
    'deny = ["_INBOX.kvmesh.>", "_INBOX.route.>", "_INBOX.load.>"]')
assert "DECISIONS" not in nobucket and "_INBOX.route" in noinbox
assert "AGENT_NODE_A = {" in text and "AGENT_NODE_B = {" in text
users = ("    {user: nobucket, password: $KVMESH_NOBUCKET_PASSWORD, "
         "permissions: $NOBUCKET}\n    {user: noinbox, password: "
         "$KVMESH_NOINBOX_PASSWORD, permissions: $NOINBOX}\n")
text = text.replace("\n  users = [\n",
                    nobucket + noinbox + "\n  users = [\n" + users)
open(path, "w").write(text)
EOF
port=$(free_port)
auth_port=$port
url=nats://127.0.0.1:$port
cat >"$tmp/auth-server.conf" <<EOF
listen: 127.0.0.1:$port
jetstream { store_dir: "$tmp/js" }
include ./auth.conf
EOF
if ! nats-server -c "$tmp/auth-server.conf" -t >"$tmp/conf-check" 2>&1; then
  fail auth_conf_valid "$(cat "$tmp/conf-check")"
  exit 1
fi
ok auth_conf_valid
serve auth "$tmp/auth-server.conf"

# as ROLE ARGS...: kvmesh ARGS on the mesh with ROLE's user and password,
# given as KVMESH_* variables (never on the command line).
as() {
  local role=$1
  shift
  local pw_var="KVMESH_${role^^}_PASSWORD"
  local cmd=$1
  shift
  KVMESH_NATS_USER=$role KVMESH_NATS_PASSWORD=${!pw_var} \
    run "$cmd" --nats "$url" "$@"
}

common=(--nats "$url" --heartbeat-ms 200)
# The index shard through flags, the agent through variables, the router
# through a config file: each way a credential may come.
"$bin" index "${common[@]}" --nats-user index \
  --nats-password "$KVMESH_INDEX_PASSWORD" --shard 0/1 --db "$tmp/db" \
  2>"$tmp/index.err" &
pids+=($!)
KVMESH_NATS_USER=agent KVMESH_NATS_PASSWORD=$KVMESH_AGENT_PASSWORD \
  "$bin" agent "${common[@]}" --engine sim --workers 2 --worker-id 0 \
  --block-tokens 16 --model m 2>"$tmp/agent.err" &
pids+=($!)
cat >"$tmp/router.toml" <<EOF
[nats]
user = "router"
password = "$KVMESH_ROUTER_PASSWORD"
EOF
router_port=$(free_port)
"$bin" router "${common[@]}" --config "$tmp/router.toml" --name router-0 \
  --block-tokens 16 --durable --metrics-port "$router_port" \
  --metrics-address 127.0.0.1 2>"$tmp/router.err" &
pids+=($!)
end=$((SECONDS + 20))
while true; do
  as admin admin workers --json
  if [ "$rc" -eq 0 ] &&
    jtest 'assert sum(w["state"] == "live" for w in d["workers"]) == 2'; then
    break
  fi
  if [ "$SECONDS" -ge "$end" ]; then
    fail mesh_up "workers not live: $out $err $(cat "$tmp"/*.err)"
    exit 1
  fi
  sleep 0.2
done
ok mesh_up_with_a_user_per_role

# The gateway with its user: it hears the workers (its /health), routes a
# request (simulated GPUs have no front: the proxy fails after each
# decision, 502; a decision that never came would be a 504).
gateway_port=$(free_port)
gateway_metrics=$(free_port)
KVMESH_NATS_USER=gateway KVMESH_NATS_PASSWORD=$KVMESH_GATEWAY_PASSWORD \
  "$bin" gateway "${common[@]}" --name gw-0 --block-tokens 16 \
  --listen "127.0.0.1:$gateway_port" --metrics-port "$gateway_metrics" \
  --metrics-address 127.0.0.1 2>"$tmp/gateway.err" &
pids+=($!)
end=$((SECONDS + 20))
until said=$(fetch "http://127.0.0.1:$gateway_port/health") &&
  [ "${said:0:3}" = 200 ]; do
  if [ "$SECONDS" -ge "$end" ]; then
    fail gateway_hears_workers "$said: $(cat "$tmp/gateway.err")"
    break
  fi
  sleep 0.2
done
[ "${said:0:3}" != 200 ] || ok gateway_hears_workers
said=$(fetch "http://127.0.0.1:$gateway_port/v1/completions" \
  "{\"model\":\"m\",\"max_tokens\":1,\"prompt\":[$prompt]}")
if [ "${said:0:3}" = 502 ]; then ok gateway_routes; else
  fail gateway_routes "$said: $(cat "$tmp/gateway.err")"
fi

run admin workers --nats "$url"
expect no_credential_refused 1 "authentication failed"

as client route --block-tokens 16 --tokens "$prompt" --json
if [ "$rc" -eq 0 ] && jtest 'assert d["worker"] in (0, 1)'; then
  ok client_routes
else
  fail client_routes "exit $rc: $out $err"
fi
# Durable: the decision comes, and the decisions bucket (where an answer
# missed while reconnecting is read) is readable with this credential.
as client route --block-tokens 16 --tokens "$prompt" --durable
if [ "$rc" -eq 0 ] && grep -qE -- "-> worker [01] " <<<"$out" &&
  ! grep -qi "permission" <<<"$err"; then
  ok client_routes_durable
else
  fail client_routes_durable "exit $rc: $out $err"
fi
as client route --block-tokens 16 --tokens "$prompt" --json --durable
if [ "$rc" -eq 0 ] && jtest 'assert d["worker"] in (0, 1)' &&
  ! grep -qi "permission" <<<"$err"; then
  ok client_routes_durable_json
else
  fail client_routes_durable_json "exit $rc: $out $err"
fi
# A load through the durable queue as client: every request decided.
client_url=nats://client:$KVMESH_CLIENT_PASSWORD@127.0.0.1:$auth_port
run load --nats "$client_url" --durable --rate 20 --duration-s 2 \
  --drain-s 3 --block-tokens 16 --json
if [ "$rc" -eq 0 ] && jtest 'assert d["sent"] >= 30, d
assert d["decided"] == d["sent"] and d["errors"] == 0, d' &&
  ! grep -qE "NATS permission denied|DECISIONS|_INBOX" <<<"$err"; then
  ok client_loads_durable
else
  fail client_loads_durable "exit $rc: $out $err"
fi

# A durable client that cannot read its answer stops at once, exit 1 (not
# a usage error), saying why; its request never sent.
as nobucket route --block-tokens 16 --tokens "$prompt" --durable
expect durable_without_the_bucket 1 \
  "permission denied.*KV_KVMESH_ROUTE_DECISIONS"
run load --nats "nats://nobucket:$KVMESH_NOBUCKET_PASSWORD@127.0.0.1:$auth_port" \
  --durable --rate 20 --duration-s 1 --block-tokens 16 --json
expect load_durable_without_the_bucket 1 \
  "permission denied.*KV_KVMESH_ROUTE_DECISIONS"
as noinbox route --block-tokens 16 --tokens "$prompt" --durable
expect durable_without_its_inbox 1 "permission denied.*_INBOX\.route\."
run load --nats "nats://noinbox:$KVMESH_NOINBOX_PASSWORD@127.0.0.1:$auth_port" \
  --durable --rate 20 --duration-s 1 --block-tokens 16 --json
expect load_durable_without_its_inbox 1 "permission denied.*_INBOX\.load\."

# subscribe USER PASSWORD SUBJECT: subscribes over NATS's own protocol and
# prints the server's verdict: "subscribed", or its -ERR line.
# publish USER PASSWORD SUBJECT: likewise for a publish ("published").
nats_verdict() {
  python3 - "$auth_port" "$@" <<'EOF'
import json, socket, sys
port, verb, user, password, subject = sys.argv[1:]
s = socket.create_connection(("127.0.0.1", int(port)), timeout=5)
f = s.makefile("rb")
f.readline()  # INFO
connect = {"user": user, "pass": password, "verbose": False, "pedantic": False}
op = "SUB %s 1" % subject if verb == "subscribe" else "PUB %s 1\r\nx" % subject
s.sendall(("CONNECT %s\r\n%s\r\nPING\r\n" % (json.dumps(connect), op)).encode())
while True:
    line = f.readline().decode().strip()
    if line.startswith("-ERR") or line == "PONG":
        print({"subscribe": "subscribed", "publish": "published"}[verb]
              if line == "PONG" else line)
        break
EOF
}
subscribe() { nats_verdict subscribe "$@"; }
publish() { nats_verdict publish "$@"; }
# refused NAME VERB USER PASSWORD SUBJECT...: check NAME:SUBJECT passes when
# nats-server refuses USER's VERB (publish or subscribe) of each SUBJECT.
refused() {
  local name=$1 verb=$2 user=$3 pw=$4 subject said want=Subscription
  shift 4
  [ "$verb" = subscribe ] || want=Publish
  for subject in "$@"; do
    said=$(nats_verdict "$verb" "$user" "$pw" "$subject")
    if grep -q "Permissions Violation for $want" <<<"$said"; then
      ok "$name:$subject"
    else
      fail "$name:$subject" "$said"
    fi
  done
}
# The mesh's own inboxes, where bids and index answers travel, are only the
# mesh's to read; the roles that read replies have the other inboxes.
for role in client admin monitor; do
  pw_var="KVMESH_${role^^}_PASSWORD"
  refused "${role}_cannot_read_mesh_inboxes" subscribe "$role" "${!pw_var}" \
    "_INBOX.kvmesh.>"
  said=$(subscribe "$role" "${!pw_var}" "_INBOX.route.1")
  if [ "$said" = subscribed ]; then
    ok "${role}_reads_its_inboxes"
  else
    fail "${role}_reads_its_inboxes" "$said"
  fi
done
said=$(subscribe agent "$KVMESH_AGENT_PASSWORD" "_INBOX.kvmesh.>")
if [ "$said" = subscribed ]; then ok agent_reads_mesh_inboxes; else
  fail agent_reads_mesh_inboxes "$said"
fi
# The gateway's user sends route requests, hears workers' heartbeats and
# reads gateways' inboxes, nothing else.
gw_pw=$KVMESH_GATEWAY_PASSWORD
refused gateway_cannot_publish publish gateway "$gw_pw" kvmesh.route.json \
  kvmesh.admin.drain kvmesh.agent.a.award kvmesh.heartbeat.worker.a \
  _INBOX.kvmesh.1
refused gateway_cannot_hear subscribe gateway "$gw_pw" "_INBOX.kvmesh.>" \
  _INBOX.route.1 kvmesh.route kvmesh.events kvmesh.heartbeat.router \
  "kvmesh.agent.>"

# The client may not act as an admin: refused at once with the reason (not
# a timeout), and nothing changed as the admin sees it.
as client admin drain 0 --timeout-ms 30000
expect client_cannot_drain 1 "permission denied.*kvmesh\.admin\.drain"
as client admin weights set --beta 0.5 --timeout-ms 30000
# (set reads the weights first: the read is what is refused)
expect client_cannot_set_weights 1 \
  "permission denied.*kvmesh\.admin\.weights\."
as client admin workers
expect client_cannot_list_workers 1 "permission denied"
as admin admin workers --json
if [ "$rc" -eq 0 ] &&
  jtest 'assert [w["state"] for w in d["workers"]] == ["live", "live"]'; then
  ok client_drain_changed_nothing
else
  fail client_drain_changed_nothing "exit $rc: $out $err"
fi
as admin admin weights --json
if [ "$rc" -eq 0 ] && jtest 'assert d["weights"]["beta"] != 0.5'; then
  ok client_weights_changed_nothing
else
  fail client_weights_changed_nothing "exit $rc: $out $err"
fi

# An agent's user bids and reports; it neither routes nor administers.
as agent route --block-tokens 16 --tokens "$prompt"
expect agent_cannot_route 1 "permission denied"
as agent admin drain 0
expect agent_cannot_drain 1 "permission denied"
as router admin drain 0
expect router_cannot_send_admin_verbs 1 "permission denied"

# The monitor looks and changes nothing.
as monitor admin weights --json
if [ "$rc" -eq 0 ] && jtest 'assert "beta" in d["weights"]'; then
  ok monitor_reads_weights
else
  fail monitor_reads_weights "exit $rc: $out $err"
fi
as monitor admin undrain 1
expect monitor_cannot_undrain 1 "permission denied.*kvmesh\.admin\.undrain"

# Only the admin changes things.
as admin admin drain 1
if [ "$rc" -ne 0 ]; then fail admin_drains "exit $rc: $err"; fi
# The router learns the state from the agent's next heartbeat.
end=$((SECONDS + 10))
while true; do
  as admin admin workers --json
  if jtest 'assert [w["state"] for w in d["workers"] if w["id"] == 1] == ["draining"]'; then
    ok admin_drains
    break
  fi
  if [ "$SECONDS" -ge "$end" ]; then
    fail admin_drains "worker 1 not draining: $out $err"
    break
  fi
  sleep 0.2
done
as admin admin undrain 1
as admin admin weights set --beta 0.04
if [ "$rc" -eq 0 ]; then ok admin_sets_weights; else
  fail admin_sets_weights "exit $rc: $err"
fi
# A weight out of its range would make every price infinite: a usage error.
as admin admin weights set --beta 1e308
expect weight_out_of_range 2 "price weight beta must be in \[0, 1000\]"
as admin admin weights --json
if [ "$rc" -eq 0 ] && jtest 'assert d["weights"]["beta"] == 0.04'; then
  ok weight_out_of_range_changed_nothing
else
  fail weight_out_of_range_changed_nothing "exit $rc: $out $err"
fi

# An agent with a user of its own (auth.conf's AGENT_NODE_A) joins the mesh;
# another agent's user may not speak on its subjects nor hear its calls.
KVMESH_NATS_USER=node-a KVMESH_NATS_PASSWORD=$KVMESH_AGENT_NODE_A_PASSWORD \
  "$bin" agent "${common[@]}" --name node-a --engine sim --workers 2 \
  --worker-id 2 --block-tokens 16 2>"$tmp/agent-node-a.err" &
pids+=($!)
end=$((SECONDS + 20))
while true; do
  as admin admin workers --json
  if [ "$rc" -eq 0 ] && jtest 'assert sorted(w["id"] for w in d["workers"]
    if w["state"] == "live") == [0, 1, 2, 3]'; then
    ok own_agent_user_joins
    break
  fi
  if [ "$SECONDS" -ge "$end" ]; then
    fail own_agent_user_joins "$out $err $(cat "$tmp/agent-node-a.err")"
    break
  fi
  sleep 0.2
done
b_pw=$KVMESH_AGENT_NODE_B_PASSWORD
refused agent_cannot_publish_as_another publish node-b "$b_pw" \
  kvmesh.heartbeat.worker.node-a kvmesh.kv.0.node-a kvmesh.kv.0.node-a.batch
refused agent_cannot_hear_another subscribe node-b "$b_pw" \
  "kvmesh.agent.node-a.>" "_INBOX.kvmesh.node-a.>" "_INBOX.kvmesh.>"
said=$(publish node-b "$b_pw" kvmesh.heartbeat.worker.node-b)
if [ "$said" = published ]; then ok agent_publishes_as_itself; else
  fail agent_publishes_as_itself "$said"
fi

# Wrong password: refused with a clear error, the password never shown.
KVMESH_NATS_USER=client KVMESH_NATS_PASSWORD=not-the-password \
  run route --nats "$url" --block-tokens 16 --tokens "$prompt"
expect wrong_password_refused 1 "authentication failed"
if grep -q "not-the-password" <<<"$out$err"; then
  fail wrong_password_not_shown "$err"
else
  ok wrong_password_not_shown
fi
run admin workers --nats "nats://client:not-the-password@127.0.0.1:$port"
if [ "$rc" -eq 1 ] && grep -q "authentication failed" <<<"$err" &&
  ! grep -q "not-the-password" <<<"$err"; then
  ok url_password_refused_and_masked
else
  fail url_password_refused_and_masked "exit $rc: $err"
fi

# `config show` masks secrets: the file's password and a variable's token.
KVMESH_NATS_TOKEN=tok-secret run config show --config "$tmp/router.toml"
if [ "$rc" -eq 0 ] && grep -q '^password = "\*\*\*"' <<<"$out" &&
  grep -q '^token = "\*\*\*"' <<<"$out" &&
  ! grep -q -e "$KVMESH_ROUTER_PASSWORD" -e tok-secret <<<"$out"; then
  ok config_show_masks_secrets
else
  fail config_show_masks_secrets "exit $rc: $(grep -e password -e token <<<"$out")"
fi

# Conflicting or incomplete settings: usage errors naming the keys.
KVMESH_NATS_USER=client KVMESH_NATS_TOKEN=t \
  KVMESH_NATS_PASSWORD=x run admin workers --nats "$url"
expect two_ways_of_authenticating 2 "one way of authenticating"
run admin workers --nats "$url" --nats-password x
expect password_without_user 2 "nats.password is set without nats.user"
run admin workers --nats "$url" --nats-tls-cert "$tmp/router.toml"
expect cert_without_key 2 "nats.tls_cert is set without nats.tls_key"
run admin workers --nats "$url" --nats-tls-ca "$tmp/none.pem"
expect missing_ca_file 2 "nats-tls-ca"

# The mesh ran without a permission violation: auth.conf allows every
# subject its roles use (the router's counter says 0 too).
if grep -i "permission denied" "$tmp"/{index,agent,router,gateway}.err; then
  fail mesh_never_refused "$(grep -ih "permission" "$tmp"/*.err | head -5)"
else
  ok mesh_never_refused
fi
metrics=$(python3 -c "import urllib.request
print(urllib.request.urlopen('http://127.0.0.1:$router_port/metrics').read().decode())")
if grep -q "^kvmesh_nats_permission_denials_total 0$" <<<"$metrics"; then
  ok permission_denials_metric
else
  fail permission_denials_metric "$(grep nats_ <<<"$metrics")"
fi
said=$(fetch "http://127.0.0.1:$gateway_metrics/metrics")
if grep -q "^kvmesh_nats_permission_denials_total 0$" <<<"$said" &&
  grep -qE "^kvmesh_gateway_route_seconds_count [1-9]" <<<"$said"; then
  ok gateway_permission_denials_metric
else
  fail gateway_permission_denials_metric \
    "$(grep -e nats_perm -e route_seconds_count <<<"$said")"
fi

# -- token, through `kvmesh up` to its children -------------------------------

port=$(free_port)
cat >"$tmp/token-server.conf" <<EOF
listen: 127.0.0.1:$port
authorization { token: "tok-$RANDOM$RANDOM" }
EOF
token=$(sed -n 's/.*token: "\(.*\)".*/\1/p' "$tmp/token-server.conf")
serve token "$tmp/token-server.conf"
KVMESH_NATS_TOKEN=$token "$bin" up --nats "nats://127.0.0.1:$port" \
  --workers 2 --routers 1 --heartbeat-ms 200 --prefix tok \
  >"$tmp/up.out" 2>"$tmp/up.err" &
pids+=($!)
end=$((SECONDS + 20))
while true; do
  KVMESH_NATS_TOKEN=$token run admin workers --json --prefix tok \
    --nats "nats://127.0.0.1:$port"
  if [ "$rc" -eq 0 ] && jtest 'assert len(d["workers"]) == 2'; then
    ok token_through_up
    break
  fi
  if [ "$SECONDS" -ge "$end" ]; then
    fail token_through_up "exit $rc: $err; up: $(tail -5 "$tmp/up.err")"
    break
  fi
  sleep 0.2
done
KVMESH_NATS_TOKEN=wrong run admin workers --nats "nats://127.0.0.1:$port"
expect wrong_token_refused 1 "authentication failed"

# -- nkey: a user key made by openssl, encoded as nk would --------------------

# nkey DIR: writes DIR/seed (SU...) and prints the public key (U...).
nkey() { python3 "$(dirname "$0")/nats_auth.py" nkey "$1"; }
mkdir -p "$tmp/nk1" "$tmp/nk2"
pub=$(nkey "$tmp/nk1")
other=$(nkey "$tmp/nk2")
port=$(free_port)
cat >"$tmp/nkey-server.conf" <<EOF
listen: 127.0.0.1:$port
authorization { users = [ { nkey: $pub } ] }
EOF
serve nkey "$tmp/nkey-server.conf"
nk=(--nats "nats://127.0.0.1:$port" --prefix nk)
"$bin" router "${nk[@]}" --nats-nkey "$pub" --nats-nkey-seed "$tmp/nk1/seed" \
  --name nk-router --block-tokens 16 --heartbeat-ms 200 2>"$tmp/nk.err" &
pids+=($!)
if poll 15 admin routers --json "${nk[@]}" --nats-nkey "$pub" \
  --nats-nkey-seed "$tmp/nk1/seed" -- \
  'assert [r["name"] for r in d["routers"]] == ["nk-router"]'; then
  ok nkey_connects
else
  fail nkey_connects "exit $rc: $err $(cat "$tmp/nk.err")"
fi
run admin routers "${nk[@]}" --nats-nkey "$pub" --nats-nkey-seed "$tmp/nk2/seed"
expect nkey_wrong_seed_refused 1 "authentication failed"
run admin routers "${nk[@]}" --nats-nkey "$other" --nats-nkey-seed "$tmp/nk2/seed"
expect nkey_unknown_key_refused 1 "authentication failed"

# -- creds: a file libnats cannot read is an error naming the key -------------

printf 'not a creds file\n' >"$tmp/bad.creds"
run admin routers "${nk[@]}" --nats-creds "$tmp/bad.creds"
expect bad_creds_file 1 "nats.creds .*bad.creds cannot be used"

# -- creds: decentralized auth (operator, account and user JWTs, as nsc
# makes them; tests/cli/nats_auth.py) ---------------------------------------

mkdir -p "$tmp/jwt"
python3 "$(dirname "$0")/nats_auth.py" jwt "$tmp/jwt"
port=$(free_port)
{
  echo "listen: 127.0.0.1:$port"
  cat "$tmp/jwt/resolver.conf"
} >"$tmp/jwt-server.conf"
serve jwt "$tmp/jwt-server.conf"
jw=(--nats "nats://127.0.0.1:$port" --prefix jw)
# Good credentials were refused once right after the server came up (a
# clean-clone CI run), and a router refused at start gives up: wait until
# these get through ("no responders" is through) before starting it.
end=$((SECONDS + 10))
while run admin routers "${jw[@]}" --nats-creds "$tmp/jwt/user.creds" &&
  grep -q "authentication failed" <<<"$err" && [ "$SECONDS" -lt "$end" ]; do
  sleep 0.2
done
"$bin" router "${jw[@]}" --nats-creds "$tmp/jwt/user.creds" \
  --name jwt-router --block-tokens 16 --heartbeat-ms 200 2>"$tmp/jw.err" &
pids+=($!)
if poll 15 admin routers --json "${jw[@]}" --nats-creds "$tmp/jwt/user.creds" \
  -- 'assert [r["name"] for r in d["routers"]] == ["jwt-router"]'; then
  ok creds_connects
else
  fail creds_connects "exit $rc: $err $(cat "$tmp/jw.err")"
fi
run admin routers "${jw[@]}" --nats-creds "$tmp/jwt/stranger.creds"
expect creds_unknown_account_refused 1 "authentication failed"
run admin routers "${jw[@]}"
expect creds_missing_refused 1 "authentication failed"

# -- TLS required: certificates made here -------------------------------------

mk_cert() { # NAME CA_NAME SUBJECT [SAN]: NAME.pem and NAME.key signed by CA
  openssl req -new -newkey rsa:2048 -nodes -keyout "$tmp/$1.key" \
    -subj "/CN=$3" -out "$tmp/$1.csr" 2>/dev/null
  printf 'subjectAltName=%s\n' "${4:-DNS:$3}" >"$tmp/$1.ext"
  openssl x509 -req -in "$tmp/$1.csr" -CA "$tmp/$2.pem" -CAkey "$tmp/$2.key" \
    -CAcreateserial -days 2 -extfile "$tmp/$1.ext" -out "$tmp/$1.pem" \
    2>/dev/null
}
for ca in ca other-ca; do
  openssl req -x509 -newkey rsa:2048 -nodes -keyout "$tmp/$ca.key" \
    -subj "/CN=kvmesh test $ca" -days 2 -out "$tmp/$ca.pem" 2>/dev/null
done
mk_cert server ca localhost "DNS:localhost,IP:127.0.0.1"
mk_cert client ca kvmesh-client
port=$(free_port)
cat >"$tmp/tls-server.conf" <<EOF
listen: 127.0.0.1:$port
tls {
  cert_file: "$tmp/server.pem"
  key_file: "$tmp/server.key"
  ca_file: "$tmp/ca.pem"
  verify: true
}
EOF
serve tls "$tmp/tls-server.conf"
tls=(--nats "nats://127.0.0.1:$port" --prefix tls)
mine=(--nats-tls-ca "$tmp/ca.pem" --nats-tls-cert "$tmp/client.pem"
  --nats-tls-key "$tmp/client.key")
"$bin" router "${tls[@]}" "${mine[@]}" --name tls-router --block-tokens 16 \
  --heartbeat-ms 200 2>"$tmp/tls.err" &
pids+=($!)
if poll 15 admin routers --json "${tls[@]}" "${mine[@]}" -- \
  'assert [r["name"] for r in d["routers"]] == ["tls-router"]'; then
  ok tls_with_ca_and_client_certificate
else
  fail tls_with_ca_and_client_certificate "exit $rc: $err $(cat "$tmp/tls.err")"
fi
run admin routers "${tls[@]}"
expect plain_refused_by_tls_server 1 "requires TLS"
run admin routers "${tls[@]}" --nats-tls-ca "$tmp/other-ca.pem" \
  --nats-tls-cert "$tmp/client.pem" --nats-tls-key "$tmp/client.key"
expect unknown_ca_refused 1 "TLS handshake failed"
# The server checks the client's certificate after TLS 1.3's handshake and
# closes: said as TLS, not as a server that is not there.
run admin routers "${tls[@]}" --nats-tls-ca "$tmp/ca.pem"
expect tls_without_client_certificate 1 \
  "TLS handshake failed.*may require a client certificate \(--nats-tls-cert and --nats-tls-key"
if grep -q "is nats-server running there" <<<"$err"; then
  fail tls_without_client_certificate_not_unreachable "$err"
else
  ok tls_without_client_certificate_not_unreachable
fi
mk_cert stranger other-ca kvmesh-stranger
run admin routers "${tls[@]}" --nats-tls-ca "$tmp/ca.pem" \
  --nats-tls-cert "$tmp/stranger.pem" --nats-tls-key "$tmp/stranger.key"
expect client_certificate_of_another_ca 1 \
  "TLS handshake failed.*client certificate signed by a CA it trusts"

if [ "$fails" -gt 0 ]; then
  echo "$fails check(s) failed"
  exit 1
fi
echo "all security checks passed"
