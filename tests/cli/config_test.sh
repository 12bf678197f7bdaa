#!/bin/bash
# The config file and KVMESH_* variables on the real binary: `kvmesh config
# check` and its exit codes, errors that name key, file and line,
# precedence flag > variable > file, docs/config.md up to date, and the log
# lines of a process as text and JSON.
# usage: config_test.sh KVMESH_BINARY SOURCE_ROOT
set -u
bin=$1
root=$2
fails=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# Only what a case sets: none of the caller's KVMESH_* leaks in.
for v in $(env | sed -n 's/^\(KVMESH_[A-Z0-9_]*\)=.*/\1/p'); do unset "$v"; done

ok() { echo "ok   $1"; }
fail() {
  echo "FAIL $1: $2"
  fails=$((fails + 1))
}

# expect NAME WANT_EXIT PATTERN -- [VAR=VALUE...] ARGS...: runs kvmesh with
# those variables, checks the exit code and that stdout+stderr match the
# grep -E pattern.
expect() {
  local name=$1 want=$2 pattern=$3 vars=()
  shift 4
  while [[ $# -gt 0 && $1 == KVMESH_*=* ]]; do
    vars+=("$1")
    shift
  done
  out=$(env "${vars[@]}" "$bin" "$@" 2>&1)
  local got=$?
  if [ "$got" -ne "$want" ]; then
    fail "$name" "exit $got, want $want: $out"
  elif ! grep -Eq -- "$pattern" <<<"$out"; then
    fail "$name" "output lacks /$pattern/: $out"
  else
    ok "$name"
  fi
}

# -- kvmesh config check --------------------------------------------------------
expect check_example 0 'kvmesh.toml: ok' -- \
  config check "$root/deploy/kvmesh.toml"

cat >"$tmp/unknown.toml" <<'EOF'
[router]
fanout = 8
fanuot = 9
EOF
expect check_unknown_key 2 \
  "unknown.toml:3: unknown key router.fanuot \(did you mean router.fanout\?\)" \
  -- config check "$tmp/unknown.toml"

printf '[router]\nmax_inflight = "lots"\n' >"$tmp/type.toml"
expect check_wrong_type 2 \
  'type.toml:2: router.max_inflight: want an integer >= 0, got a string' \
  -- config check "$tmp/type.toml"

printf '[agent]\n\nworkers = 0\n' >"$tmp/range.toml"
expect check_out_of_range 2 'range.toml:3: agent.workers = 0: must be a positive number' \
  -- config check "$tmp/range.toml"

printf '[log]\nformat = "xml"\n' >"$tmp/log.toml"
expect check_log_format 2 "log.toml:2: log.format = \"xml\": unknown log format 'xml'" \
  -- config check "$tmp/log.toml"

printf '[routers]\nfanout = 8\n' >"$tmp/section.toml"
expect check_unknown_section 2 'unknown section \[routers\] \(did you mean \[router\]\?\)' \
  -- config check "$tmp/section.toml"

printf '[router\nfanout = 8\n' >"$tmp/broken.toml"
expect check_not_toml 2 'broken.toml:1:[0-9]+: not TOML' \
  -- config check "$tmp/broken.toml"

expect check_missing_file 2 'nonexistent.toml: cannot read the config file' \
  -- config check "$tmp/nonexistent.toml"
expect check_needs_a_file 2 'FILE is required' -- config check

# -- kvmesh config show ---------------------------------------------------------
expect show_defaults 0 '^max_inflight = 128$' -- config show
expect show_file 0 "^max_inflight = 128  # from .*kvmesh.toml:[0-9]+$" -- \
  config show --config "$root/deploy/kvmesh.toml"
printf '[router]\nfanout = 8\n' >"$tmp/good.toml"
expect show_variable_beats_file 0 '^fanout = 16  # from KVMESH_ROUTER_FANOUT$' \
  -- KVMESH_ROUTER_FANOUT=16 config show --config "$tmp/good.toml"
expect show_bad_variable 2 'KVMESH_ROUTER_FANOUT=0: must be a positive number' \
  -- KVMESH_ROUTER_FANOUT=0 config show
# The output is a valid config file itself.
"$bin" config show >"$tmp/shown.toml" 2>&1
expect show_round_trips 0 'shown.toml: ok' -- config check "$tmp/shown.toml"

# Every key the code knows is in docs/config.md, with its default: the
# tables there are `kvmesh config docs`, verbatim.
doc=$root/docs/config.md
begin='<!-- kvmesh config docs: begin -->'
end='<!-- kvmesh config docs: end -->'
if ! grep -qF "$begin" "$doc" || ! grep -qF "$end" "$doc"; then
  fail docs_config_md "$doc has no $begin ... $end block"
elif ! diff <(sed -n "/^$begin\$/,/^$end\$/p" "$doc" | sed '1d;$d') \
  <("$bin" config docs) >"$tmp/docs.diff"; then
  fail docs_config_md "docs/config.md is not what \`kvmesh config docs\` \
prints: regenerate its tables with it
$(head -20 "$tmp/docs.diff")"
else
  ok docs_config_md
fi

# -- precedence on a command: which NATS URL the router tries --------------------
# Nothing listens on these ports: the router fails (exit 1) naming the URL
# it was given, and so tells which source won.
dead() { echo "nats://127.0.0.1:$1"; }
printf '[nats]\nurl = "%s"\n' "$(dead 9)" >"$tmp/nats.toml"
expect router_url_from_file 1 "NATS nats://127.0.0.1:9: cannot connect" -- \
  router --config "$tmp/nats.toml"
expect router_url_variable_beats_file 1 "NATS nats://127.0.0.1:8: cannot connect" -- \
  "KVMESH_NATS_URL=$(dead 8)" router --config "$tmp/nats.toml"
expect router_url_flag_beats_variable 1 "NATS nats://127.0.0.1:7: cannot connect" -- \
  "KVMESH_NATS_URL=$(dead 8)" router --config "$tmp/nats.toml" \
  --nats "$(dead 7)"
expect router_config_from_variable 1 "NATS nats://127.0.0.1:9: cannot connect" -- \
  "KVMESH_CONFIG=$tmp/nats.toml" router
expect router_still_needs_nats 2 '--nats is required' -- router
expect router_bad_file 2 \
  "kvmesh router: .*unknown.toml:3: unknown key router.fanuot" -- \
  router --nats "$(dead 9)" --config "$tmp/unknown.toml"
expect router_bad_variable 2 \
  'kvmesh router: KVMESH_ROUTER_FANOUT=0: must be a positive number' -- \
  KVMESH_ROUTER_FANOUT=0 router --nats "$(dead 9)"
# Another command's variables are not this one's business.
expect index_ignores_router_variables 1 'cannot connect' -- \
  KVMESH_ROUTER_FANOUT=many index --nats "$(dead 9)" --shard 0/1 \
  --db "$tmp/db"
# A file that serves the NATS mesh may hold nats.url: `up --embedded`
# ignores it, where the flag is refused.
expect up_embedded_ignores_file_url 0 '^kvmesh ' -- \
  up --embedded --config "$tmp/nats.toml" --workers 2 \
  --trace "$root/tests/data/sample_trace.jsonl" --speedup 4 \
  --time-scale 50 --gpu-blocks 2000
expect up_embedded_refuses_flag_url 2 '--nats: only for the NATS mesh' -- \
  up --embedded --nats "$(dead 9)" --workers 2

# -- log lines ------------------------------------------------------------------
expect log_text 1 \
  '^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:]{8}\.[0-9]{3}Z error router router-x: NATS .*cannot connect' \
  -- router --nats "$(dead 9)" --name router-x
# JSON: every line of stderr one object with ts, level, proc and msg.
KVMESH_LOG_FORMAT=json "$bin" router --nats "$(dead 9)" --name r1 \
  2>"$tmp/json.log" >/dev/null
if python3 - "$tmp/json.log" <<'EOF'; then
import json, sys
lines = open(sys.argv[1]).read().splitlines()
assert lines, "no log lines"
for line in lines:
    d = json.loads(line)
    assert set(d) == {"ts", "level", "proc", "msg"}, d
assert any(d["level"] == "error" and d["proc"] == "router r1" and
           "cannot connect" in d["msg"] for d in map(json.loads, lines)), lines
EOF
  ok log_json
else
  fail log_json "$(cat "$tmp/json.log")"
fi
expect log_bad_level 2 "--log-level: unknown log level 'loud'" -- \
  router --nats "$(dead 9)" --log-level loud
# Clients keep their plain lines.
expect client_plain_error 1 '^kvmesh route: .*cannot connect' -- \
  route --nats "$(dead 9)" --block-tokens 4 --tokens 1,2,3,4

if [ "$fails" -ne 0 ]; then
  echo "$fails config checks failed"
  exit 1
fi
echo "config checks passed"
