# The one check of the binary-only shell tests (cli, usage): sourced after
# the script set bin (the kvmesh binary) and fails (0).

# expect NAME WANT_EXIT PATTERN -- ARGS...: runs kvmesh ARGS, checks the exit
# code and that stdout+stderr match the grep pattern.
expect() {
  name=$1 want=$2 pattern=$3
  shift 4
  out=$("$bin" "$@" 2>&1)
  got=$?
  if [ "$got" -ne "$want" ]; then
    echo "FAIL $name: exit $got, want $want"; echo "$out"; fails=$((fails + 1))
  elif ! printf '%s\n' "$out" | grep -Eq -- "$pattern"; then
    echo "FAIL $name: output lacks /$pattern/"; echo "$out"
    fails=$((fails + 1))
  else
    echo "ok   $name"
  fi
}
