#!/bin/sh
# One exit-code rule on every command: 2 for bad usage (CLI11's parse errors
# as kvmesh's own), 1 when a command could not do its job, 0 for --help and
# --version; each usage error names what is wrong. No nats-server needed:
# the usage errors come before any connection.
# usage: usage_test.sh KVMESH_BINARY TEST_DATA_DIR
set -u
bin=$1
data=$2
fails=0
# Nothing listens on port 1 of the loopback: a connection fails at once.
dead=nats://127.0.0.1:1

. "$(dirname "$0")/expect.sh"

# An unknown flag, once the required ones are given.
unexpected='argument was not expected: --bogus'
expect hash_unknown_flag 2 "$unexpected" -- \
  hash --block-tokens 4 --tokens 1 --bogus
expect sim_unknown_flag 2 "$unexpected" -- sim --trace t.jsonl --bogus
expect up_embedded_unknown_flag 2 "$unexpected" -- up --embedded --bogus
expect bench_unknown_flag 2 "$unexpected" -- bench --bogus
expect load_unknown_flag 2 "$unexpected" -- load --nats "$dead" --bogus
expect agent_unknown_flag 2 "$unexpected" -- \
  agent --nats "$dead" --engine sim --bogus
expect route_unknown_flag 2 "$unexpected" -- \
  route --nats "$dead" --block-tokens 4 --bogus
expect admin_verb_unknown_flag 2 "$unexpected" -- \
  admin --nats "$dead" workers --bogus
expect engine_unknown_flag 2 "$unexpected" -- engine --trace t.jsonl --bogus
expect router_unknown_flag 2 "$unexpected" -- router --nats "$dead" --bogus
expect index_unknown_flag 2 "$unexpected" -- \
  index --nats "$dead" --shard 0/1 --db x --bogus
expect top_unknown_flag 2 "$unexpected" -- top --nats "$dead" --bogus
expect config_show_unknown_flag 2 "$unexpected" -- config show --bogus
expect config_docs_unknown_flag 2 "$unexpected" -- config docs --bogus
expect config_check_unknown_flag 2 "$unexpected" -- config check f --bogus
expect config_nats_auth_unknown_flag 2 "$unexpected" -- config nats-auth --bogus

# A value that is not a number, or not one the flag takes.
expect hash_bad_number 2 '^--block-tokens: .*abc' -- \
  hash --block-tokens abc --tokens 1
expect engine_bad_number 2 '^--speedup: .*fast' -- \
  engine --trace t.jsonl --speedup fast
expect sim_bad_number 2 '^--workers: .*many' -- \
  sim --trace t.jsonl --workers many
expect load_bad_number 2 '^Could not convert: --rate = fast' -- \
  load --nats "$dead" --rate fast
expect router_bad_number 2 "^--fanout: must be a positive number, got '0'" -- \
  router --nats "$dead" --fanout 0
expect top_bad_number 2 "^--interval-ms: must be a positive number, got 'x'" -- \
  top --nats "$dead" --interval-ms x
expect admin_bad_number 2 "^--timeout-ms: must be a positive number, got 'soon'" -- \
  admin workers --nats "$dead" --timeout-ms soon
expect weights_bad_credit 2 "^--c-host: must be a number from 0 to 1, got '2'" -- \
  admin weights set --nats "$dead" --c-host 2

# The client's own request id: any string of 1 to 256 bytes, no other.
long_id=$(printf '%0257d' 0)
expect route_empty_request_id 2 '^kvmesh route: --request-id: 1 to 256 bytes, not 0$' -- \
  route --nats "$dead" --block-tokens 4 --tokens 1,2,3,4 --request-id ''
expect route_long_request_id 2 '^kvmesh route: --request-id: 1 to 256 bytes, not 257$' -- \
  route --nats "$dead" --block-tokens 4 --tokens 1,2,3,4 \
  --request-id "$long_id"
# 256 bytes pass the checks (and fail to connect).
expect route_string_request_id 1 'cannot connect' -- \
  route --nats "$dead" --block-tokens 4 --tokens 1,2,3,4 \
  --request-id "chat 7/abc-123 $(printf '%0241d' 0)"

# A required option missing; the mesh's commands say where else it may
# come from.
expect hash_missing_option 2 '^--tokens is required' -- hash --block-tokens 4
expect engine_missing_option 2 'trace or --serve is required' -- engine
expect index_missing_option 2 '^--shard is required' -- index --nats "$dead"
expect route_missing_option 2 'KVMESH_\* variable or the --config file' -- \
  route --block-tokens 4 --tokens 1,2,3,4
expect config_check_missing_file 2 '^FILE is required' -- config check

# An unknown command, at the top and under a command that needs one.
expect unknown_command 2 "^kvmesh: unknown command 'bogus' \(kvmesh --help" -- \
  bogus --nats "$dead"
expect config_unknown_command 2 "^kvmesh config: unknown command 'bogus'" -- \
  config bogus
expect admin_unknown_verb 2 'argument was not expected: bogus' -- \
  admin --nats "$dead" bogus
expect no_command 2 'A subcommand is required' --

# A value refused by kvmesh itself, and one from the environment.
expect hash_own_usage_error 2 "entry 2 '2x' is not a token id" -- \
  hash --block-tokens 4 --tokens 1,2x
export KVMESH_ROUTER_FANOUT=x
expect bad_environment_value 2 'KVMESH_ROUTER_FANOUT=x: must be a positive' -- \
  router --nats "$dead"
unset KVMESH_ROUTER_FANOUT

# Not usage errors: help and version succeed, an unreachable server fails.
expect help 0 'Usage: ' -- route --help
expect top_help 0 'Subcommands:' -- --help
expect version 0 '^kvmesh [0-9]' -- --version
expect unreachable_server 1 'cannot connect' -- \
  route --nats "$dead" --block-tokens 4 --tokens 1,2,3,4
expect sim_unwritable_json 1 'no/such/dir/a.json: cannot write' -- \
  sim --trace "$data/sample_trace.jsonl" --workers 2 --policy kvmesh --quiet \
  --json /no/such/dir/a.json

[ "$fails" -eq 0 ] || { echo "$fails usage checks failed"; exit 1; }
