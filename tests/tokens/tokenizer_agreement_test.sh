#!/bin/sh
# Runs the JS reference (Hugging Face's tokenizers port, tests/npm) over a
# seeded corpus into OUT_DIR, then kvmesh's tokenizer over the same strings:
# every id of every string must agree, for Llama 3 (without and with its
# BOS template) and Qwen 2.5.
# usage: tokenizer_agreement_test.sh CHECK_BINARY NODE OUT_DIR [COUNT]
set -eu
check=$1
node=$2
out=$3
count=${4:-10000}
here=$(cd "$(dirname "$0")" && pwd)
if [ ! -d "$here/../npm/node_modules/@huggingface/tokenizers" ]; then
  echo "FAIL: tests/npm has no node_modules (run scripts/install-deps --tests)"
  exit 1
fi
mkdir -p "$out"
"$node" "$here/tokenizer_reference.mjs" "$out" "$count"
"$check" "$out" llama3 llama3_bos qwen2_5
