#!/bin/bash
# Renders seeded conversations with @huggingface/jinja (and Python's Jinja2
# when a python3 with jinja2 >= 3.1 is there) into the build directory, then
# requires kvmesh's renderer to agree byte for byte with them; the corpora
# are removed once they agree.
# usage: chat_template_test.sh CHECK_BINARY SOURCE_DIR OUT_DIR [COUNT]
set -euo pipefail
check=$1
src=$2
out=$3
count=${4:-10000}
export TZ=UTC
if [ ! -d "$src/tests/npm/node_modules/@huggingface/jinja" ]; then
  echo "tests/npm/node_modules is missing: run 'npm ci' in tests/npm" \
       "(scripts/install-deps --tests)" >&2
  exit 1
fi
mkdir -p "$out"
node "$src/tests/tokens/chat_template_reference.mjs" "$out/chat_template_ref.jsonl" "$count"
py=()
if python3 -c 'import jinja2, sys; sys.exit(0 if tuple(map(int, jinja2.__version__.split(".")[:2])) >= (3, 1) else 1)' 2>/dev/null; then
  python3 "$src/tests/tokens/chat_template_python.py" "$out/chat_template_ref.jsonl" "$out/chat_template_py.jsonl"
  py=("$out/chat_template_py.jsonl")
else
  echo "no python3 with jinja2 >= 3.1: checking against @huggingface/jinja only"
fi
"$check" "$out/chat_template_ref.jsonl" "${py[@]}"
# Half a gigabyte, made again by each run: kept only when the check fails.
rm -f "$out/chat_template_ref.jsonl" "$out/chat_template_py.jsonl"
