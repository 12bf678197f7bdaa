# Shared by the shell tests that run kvmesh processes (mesh, metrics,
# security, engine agent): their clean-up, check reporting and helpers.
# The sourcing script sets, before sourcing: bin (the kvmesh binary), tmp
# (a directory removed at exit), pids (every process it starts, an array)
# and fails (0).

# SIGTERM first, so that `kvmesh up` stops its children and removes its
# data directory; SIGKILL what is left after 8 s.
cleanup() {
  local p left end=$((SECONDS + 8))
  for p in "${pids[@]}"; do
    kill "$p" 2>/dev/null || true
  done
  while true; do
    left=""
    for p in "${pids[@]}"; do
      if ps -o stat= -p "$p" 2>/dev/null | grep -qv Z; then left+=" $p"; fi
    done
    if [ -z "$left" ] || [ "$SECONDS" -ge "$end" ]; then break; fi
    sleep 0.1
  done
  for p in $left; do
    kill -9 "$p" 2>/dev/null || true
  done
  for p in "${pids[@]}"; do
    wait "$p" 2>/dev/null || true
  done
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

ok() { echo "ok   $1"; }
fail() {
  local why=${2:-}
  [ "${#why}" -le 2000 ] || why="${why:0:2000}..."
  echo "FAIL $1${why:+: $why}"
  fails=$((fails + 1))
}

# run ARGS...: runs kvmesh; stdout in $out, stderr in $err, exit code in $rc.
run() {
  rc=0
  out=$("$bin" "$@" 2>"$tmp/err") || rc=$?
  err=$(cat "$tmp/err")
}

# jtest PYTHON: whether PYTHON holds with `d` the JSON in $out.
jtest() {
  python3 -c "import json, sys
d = json.loads(sys.stdin.read())
$1" <<<"$out" >/dev/null 2>&1
}

# poll SECONDS ARGS... -- PYTHON: runs kvmesh ARGS every 0.2 s until it
# exits 0 with JSON satisfying PYTHON; 1 when SECONDS pass first.
poll() {
  local secs=$1
  shift
  local args=()
  while [ "$1" != -- ]; do
    args+=("$1")
    shift
  done
  local code=$2 end=$((SECONDS + secs))
  while true; do
    run "${args[@]}"
    if [ "$rc" -eq 0 ] && jtest "$code"; then return 0; fi
    [ "$SECONDS" -lt "$end" ] || return 1
    sleep 0.2
  done
}

# fetch URL [BODY]: "CODE BODY" of GET URL, or of a POST of BODY (JSON)
# when given; "0 WHY" when nothing answers.
fetch() {
  python3 - "$@" <<'EOF'
import sys, urllib.request, urllib.error
data = sys.argv[2].encode() if len(sys.argv) > 2 else None
req = urllib.request.Request(sys.argv[1], data=data,
                             headers={"Content-Type": "application/json"})
try:
    with urllib.request.urlopen(req, timeout=10) as r:
        print(r.status, r.read().decode())
except urllib.error.HTTPError as e:
    print(e.code, e.read().decode())
except OSError as e:
    print(0, e)
EOF
}

free_port() {
  python3 -c 'import socket
s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# start_nats: a nats-server of the script's own on a free loopback port,
# logging to $tmp/nats.log; sets port and url, and returns once it accepts
# connections (the test ends when it does not within 10 s).
start_nats() {
  port=$(free_port)
  url=nats://127.0.0.1:$port
  nats-server -a 127.0.0.1 -p "$port" -l "$tmp/nats.log" &
  pids+=($!)
  local end=$((SECONDS + 10))
  until (: <"/dev/tcp/127.0.0.1/$port") 2>/dev/null; do
    if [ "$SECONDS" -ge "$end" ]; then
      echo "FAIL nats_server_starts: $(cat "$tmp/nats.log")"
      exit 1
    fi
    sleep 0.1
  done
}
