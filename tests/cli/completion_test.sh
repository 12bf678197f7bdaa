#!/bin/bash
# `kvmesh completion bash|zsh` and `kvmesh man` on the real binary: bash
# completes commands, nested commands, flags and file names after a flag
# that takes a value, every command of --help is offered; the zsh script
# loads under zsh; the man page renders without a groff warning and names
# every command; `--version` answers on every command.
# usage: completion_test.sh KVMESH_BINARY
set -uo pipefail
bin=$1
fails=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ok() { echo "ok   $1"; }
fail() { echo "FAIL $1${2:+: $2}"; fails=$((fails + 1)); }

"$bin" completion bash >"$tmp/kvmesh.bash" || fail bash_script "exit $?"
# complete WORDS...: what the bash completion offers for the last word.
complete_words() {
  (cd "$tmp" && bash -c '. ./kvmesh.bash
COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); _kvmesh
printf "%s\n" "${COMPREPLY[@]}"' _ "$@")
}
has() { grep -qx -- "$2" <<<"$1"; }

got=$(complete_words kvmesh ga)
if has "$got" gateway; then ok "kvmesh ga -> gateway"; else fail command "$got"; fi
got=$(complete_words kvmesh gateway --li)
if has "$got" --listen; then ok "kvmesh gateway --li -> --listen"
else fail flag "$got"; fi
got=$(complete_words kvmesh config ch)
if has "$got" check; then ok "kvmesh config ch -> check"
else fail nested "$got"; fi
got=$(complete_words kvmesh gateway --listen 0.0.0.0:8080 --ti)
if has "$got" --timeout-ms; then ok "a flag's value does not lose the command"
else fail after_value "$got"; fi
touch "$tmp/trace-a.jsonl"
got=$(complete_words kvmesh sim --trace trace-)
if has "$got" trace-a.jsonl; then ok "file names after --trace"
else fail files "$got"; fi
got=$(complete_words kvmesh sim --tr)
if has "$got" --trace && ! has "$got" --listen; then
  ok "only the command's own flags"
else fail own_flags "$got"; fi
# Every command --help lists is offered after "kvmesh ".
listed=$("$bin" --help | sed -n '/^Subcommands:/,$p' | awk 'NR > 1 && NF {print $1}')
offered=$(complete_words kvmesh "")
missing=""
for c in $listed; do has "$offered" "$c" || missing+=" $c"; done
if [ -n "$listed" ] && [ -z "$missing" ]; then
  ok "every command of --help is offered ($(wc -w <<<"$listed"))"
else fail all_commands "listed: $listed; missing:$missing"; fi

if command -v zsh >/dev/null; then
  "$bin" completion zsh >"$tmp/_kvmesh"
  if zsh -c ". $tmp/_kvmesh && whence -w _kvmesh" 2>"$tmp/zsh.err" |
    grep -q function; then ok "the zsh script loads and defines _kvmesh"
  else fail zsh "$(cat "$tmp/zsh.err")"; fi
else
  fail zsh "no zsh (scripts/install-deps --tests)"
fi

"$bin" man >"$tmp/kvmesh.1"
warnings=$(groff -man -Tutf8 -ww -z "$tmp/kvmesh.1" 2>&1)
if [ -z "$warnings" ]; then ok "groff renders kvmesh(1) without a warning"
else fail man_warnings "$warnings"; fi
page=$(MANWIDTH=100 man -l "$tmp/kvmesh.1" 2>/dev/null)
missing=""
for c in $listed; do grep -q "kvmesh $c" <<<"$page" || missing+=" $c"; done
if [ -z "$missing" ] && grep -q -- "--listen" <<<"$page" &&
  grep -q "EXIT STATUS" <<<"$page"; then
  ok "the man page has every command, their flags and the exit status"
else fail man_content "missing:$missing"; fi

version=$("$bin" --version)
for c in $listed; do
  got=$("$bin" "$c" --version 2>&1)
  [ "$got" = "$version" ] || fail "version_$c" "$got"
done
ok "--version on every command: $version"
"$bin" completion fish >/dev/null 2>&1
rc=$?
if [ "$rc" = 2 ]; then ok "an unknown shell exits 2"; else fail bad_shell "rc $rc"; fi

[ "$fails" -eq 0 ] || { echo "$fails failed"; exit 1; }
echo "all passed"
