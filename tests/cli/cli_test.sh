#!/bin/sh
# Runs the kvmesh binary as a user would and checks output and exit codes.
# usage: cli_test.sh KVMESH_BINARY TEST_DATA_DIR
set -u
bin=$1
data=$2
fails=0

. "$(dirname "$0")/expect.sh"

expect hash_vectors 0 '^e8d3ec39b907b74c 44a2b2379d6d3c3d$' -- \
  hash --block-tokens 4 --tokens 1,2,3,4,5,6,7,8,9,10
expect hash_one_line_per_block 0 '^cb38e4d7fb2dca5c cb38e4d7fb2dca5c$' -- \
  hash --block-tokens 4 --tokens 1,2,3,4
lines=$("$bin" hash --block-tokens 4 --tokens 1,2,3,4,5,6,7,8,9 | wc -l)
if [ "$lines" -ne 2 ]; then
  echo "FAIL hash_full_blocks_only: $lines lines"; fails=$((fails + 1))
else
  echo "ok   hash_full_blocks_only"
fi
expect hash_salt 0 '^ebe499ac3e8056dc ' -- \
  hash --block-tokens 4 --tokens 1,2,3,4 --salt lora-a
expect hash_block_size_zero 2 'block-tokens' -- \
  hash --block-tokens 0 --tokens 1,2
expect hash_block_size_not_a_number 2 'block-tokens' -- \
  hash --block-tokens abc --tokens 1,2
expect hash_empty_tokens 2 'token list is empty' -- \
  hash --block-tokens 4 --tokens ''
expect hash_bad_token 2 "entry 2 '2x' is not a token id" -- \
  hash --block-tokens 4 --tokens 1,2x,3
expect hash_negative_token 2 "entry 1 '-1'" -- \
  hash --block-tokens 4 --tokens=-1,2
expect hash_token_too_large 2 "4294967296" -- \
  hash --block-tokens 1 --tokens 4294967296
expect no_subcommand 2 'subcommand' --
expect engine_sample 0 'completed 20, refused 0' -- \
  engine --trace "$data/sample_trace.jsonl" --gpu-blocks 2000
expect engine_missing_trace 2 'cannot open trace file' -- \
  engine --trace /nonexistent.jsonl
expect engine_capacity_zero 2 'gpu-blocks' -- \
  engine --trace "$data/sample_trace.jsonl" --gpu-blocks 0
expect engine_bad_speedup 2 'speedup' -- \
  engine --trace "$data/sample_trace.jsonl" --speedup fast

# kvmesh sim: same seed, byte-identical JSON; another seed differs.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
sim() {
  "$bin" sim --trace "$data/conversation_head.jsonl" --workers 4 --quiet "$@"
}
sim --seed 3 --json "$tmp/a.json" >/dev/null &&
  sim --seed 3 --json "$tmp/b.json" >/dev/null &&
  sim --seed 4 --json "$tmp/c.json" >/dev/null
if ! cmp -s "$tmp/a.json" "$tmp/b.json"; then
  echo "FAIL sim_same_seed_same_json"; fails=$((fails + 1))
elif cmp -s "$tmp/a.json" "$tmp/c.json"; then
  echo "FAIL sim_other_seed_other_json"; fails=$((fails + 1))
else
  echo "ok   sim_same_seed_same_json"
fi
for key in '"scenario"' '"oracle"' '"results"' '"ttft_ms"' '"e2e_ms"' \
    '"itl_ms"' '"hit_ratio"' '"prefill_blocks"' '"throughput_tok_s"' \
    '"imbalance"' '"assigned"' '"completed"' '"requests"'; do
  if ! grep -q "$key" "$tmp/a.json"; then
    echo "FAIL sim_json_has_$key"; fails=$((fails + 1))
  fi
done
n=$(grep '"policy": "' "$tmp/a.json" | grep -vc '"all"')
if [ "$n" -ne 12 ]; then
  echo "FAIL sim_all_twelve_policies: $n"; fails=$((fails + 1))
fi
expect sim_table 0 '^kvmesh ' -- \
  sim --trace "$data/conversation_head.jsonl" --workers 2 --policy kvmesh,prefix --quiet
expect sim_zero_workers 2 'workers' -- \
  sim --trace "$data/sample_trace.jsonl" --workers 0
expect sim_bad_speeds 2 "entry 2 'fast' is not a positive number" -- \
  sim --trace "$data/sample_trace.jsonl" --workers 2 --worker-speeds 1,fast
expect sim_speed_count 2 'has 3 entries for 2 workers' -- \
  sim --trace "$data/sample_trace.jsonl" --workers 2 --worker-speeds 1,1,1
expect sim_unknown_policy 2 "unknown policy 'best'" -- \
  sim --trace "$data/sample_trace.jsonl" --policy kvmesh,best
expect sim_missing_trace 2 'cannot open trace file' -- \
  sim --trace /nonexistent.jsonl
printf '{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": [1]}\n{"timestamp": 1}\n' \
  > "$tmp/bad.jsonl"
expect sim_bad_trace_line 2 'bad.jsonl:2: field .input_length. is missing' -- \
  sim --trace "$tmp/bad.jsonl"
: > "$tmp/empty.jsonl"
expect sim_empty_trace 2 'trace has no requests' -- \
  sim --trace "$tmp/empty.jsonl"

# kvmesh up --embedded: the actor mesh on the wall clock, 50x real time.
expect up_embedded_replay 0 '^kvmesh ' -- \
  up --embedded --workers 2 --routers 2 --trace "$data/sample_trace.jsonl" \
  --speedup 4 --time-scale 50 --gpu-blocks 2000
expect up_needs_embedded 2 'only --embedded' -- \
  up --workers 2 --trace "$data/sample_trace.jsonl"
mkdir -p "$tmp/mesh"
expect up_with_persistent_shards 0 '^kvmesh ' -- \
  up --embedded --workers 3 --shards 2 --fanout 2 --data-dir "$tmp/mesh" \
  --trace "$data/sample_trace.jsonl" --speedup 4 --time-scale 50 \
  --gpu-blocks 2000
if [ ! -d "$tmp/mesh/shard-0" ] || [ ! -d "$tmp/mesh/shard-1" ]; then
  echo "FAIL up_shard_directories"; fails=$((fails + 1))
fi
printf 'garbage\n' > "$tmp/mesh/shard-1/CURRENT"
expect up_corrupted_shard 2 'index shard 1: .*shard-1' -- \
  up --embedded --shards 2 --data-dir "$tmp/mesh" \
  --trace "$data/sample_trace.jsonl"
expect up_missing_trace 2 'cannot open trace file' -- \
  up --embedded --trace /nonexistent.jsonl

[ "$fails" -eq 0 ] || { echo "$fails CLI checks failed"; exit 1; }
