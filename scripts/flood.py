# scripts/flood's NATS side, in the raw NATS protocol: waits for the
# server, and publishes forged worker heartbeats. A real heartbeat of the
# agent "flood" is the template: its worker id (a little-endian uint32 at
# byte 20 of the Cap'n Proto message) is rewritten for each copy, and with
# AGENTS > 1 its agent name too (same length: f0000, f0001, ...), on that
# name's subject, as a user allowed to publish for any agent could. With
# SECONDS, the same N beats go again every second for that long, so that
# the forged workers stay as live as real ones.
# usage: flood.py wait PORT SECONDS | flood.py beats PORT N [AGENTS [SECONDS]]
import socket
import struct
import sys
import time

ID_OFFSET = 20


def connect(port, deadline):
    while True:
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
            f = s.makefile("rb")
            f.readline()  # INFO
            s.sendall(b'CONNECT {"verbose":false,"pedantic":false}\r\n')
            return s, f
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def base36(n, width):
    digits = b"0123456789abcdefghijklmnopqrstuvwxyz"
    out = b""
    for _ in range(width):
        out = digits[n % 36:n % 36 + 1] + out
        n //= 36
    return out


def beats(port, n, agents, seconds=0):
    s, f = connect(port, time.monotonic() + 10)
    s.settimeout(30)
    s.sendall(b"SUB kvmesh.heartbeat.worker.flood 1\r\nPING\r\n")
    template = None
    while template is None:
        line = f.readline()
        if line.startswith(b"PING"):
            s.sendall(b"PONG\r\n")
        if not line.startswith(b"MSG"):
            continue
        body = f.read(int(line.split()[-1]) + 2)[:-2]
        if struct.unpack_from("<I", body, ID_OFFSET)[0] == 60000:
            template = bytearray(body)
    s.sendall(b"UNSUB 1\r\n")
    at = bytes(template).find(b"flood")
    assert at > 0, "no agent name in the heartbeat"
    msgs = []
    for k in range(n):
        name = b"flood" if agents == 1 else b"f" + base36(k % agents, 4)
        template[at:at + 5] = name
        struct.pack_into("<I", template, ID_OFFSET, 100 + k % 59000)
        msgs.append(b"PUB kvmesh.heartbeat.worker.%s %d\r\n%s\r\n"
                    % (name, len(template), bytes(template)))
    chunks = [b"".join(msgs[i:i + 500]) for i in range(0, n, 500)]
    start = time.monotonic()
    rounds = 0
    while True:
        for c in chunks:
            s.sendall(c)
        s.sendall(b"PING\r\n")
        while True:
            line = f.readline()
            if line.startswith(b"PING"):
                s.sendall(b"PONG\r\n")
            if line.startswith(b"PONG"):
                break
        rounds += 1
        if rounds >= seconds:
            break
        time.sleep(max(0.0, start + rounds - time.monotonic()))


if __name__ == "__main__":
    mode, port = sys.argv[1], int(sys.argv[2])
    if mode == "wait":
        s, _ = connect(port, time.monotonic() + float(sys.argv[3]))
        s.close()
    elif mode == "beats":
        beats(port, int(sys.argv[3]),
              int(sys.argv[4]) if len(sys.argv) > 4 else 1,
              float(sys.argv[5]) if len(sys.argv) > 5 else 0)
    else:
        sys.exit("flood.py: mode is wait or beats")
