#!/usr/bin/python3
"""A stand-in for vLLM in tests: its KV events over ZMQ, byte for byte in
vLLM's layouts, its replay endpoint, and a minimal OpenAI API with /health,
/metrics and /tokenize. A control endpoint (POST /control) makes it store,
offload, remove and clear blocks, lose or garble messages, restart, slow
its tokens down, stop answering, fail requests before their first byte or
mid-stream, and tell what it received and sent. Like vLLM, it aborts a
request whose client closes the connection, in its prefill or while its
tokens come, and says so ("seen": "aborted"; "stats": "client_gone").

The tokenizer (/tokenize) is deterministic: one token per UTF-8 byte of the
text, token id = byte + 1000; messages are first rendered with a fixed
template: "<|ROLE|>" + content + "\n" per message (the texts of a content
array concatenated), then "<|assistant|>" when add_generation_prompt.

usage: standin_engine.py [--pub-port P] [--replay-port R] --http-port H
                         [--block-size 4] [--topic T] [--layout map]
                         [--hashes bytes] [--gpu-blocks 1000]
--pub-port 0 (the default): no KV events (no ZMQ needed); --http-port 0: a
free port. Prints "ready http_port=H" on stdout once every socket is bound.
"""

import argparse
import hashlib
import json
import select
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# ZMQ and msgpack are imported only when KV events are published
# (--pub-port), so that the HTTP side runs on a bare python3.
msgpack = None
zmq = None

# The replay endpoint's end marker: -1 as 8 signed big-endian bytes.
END_SEQ = (-1).to_bytes(8, "big", signed=True)


class Engine:
    """The stand-in's cache, publisher and knobs, shared by its threads."""

    def __init__(self, args):
        self.args = args
        self.block_size = args.block_size
        self.topic = args.topic.encode("utf-8")
        self.layout = args.layout  # array | mixed | map
        self.hashes = args.hashes  # bytes | int | sint
        self.lock = threading.Lock()
        self.pub = None
        self.replay = None
        if args.pub_port:
            global msgpack, zmq
            import msgpack as _msgpack
            import zmq as _zmq
            msgpack, zmq = _msgpack, _zmq
            self.ctx = zmq.Context.instance()
            self.pub = self.ctx.socket(zmq.PUB)
            self.pub.bind(f"tcp://127.0.0.1:{args.pub_port}")
        if args.pub_port and args.replay_port:
            self.replay = self.ctx.socket(zmq.ROUTER)
            self.replay.bind(f"tcp://127.0.0.1:{args.replay_port}")
        self.replay_on = True
        self.seq = 0
        self.buffer = []  # (seq, payload) for replay
        self.cached = {"GPU": set(), "CPU": set(), "DISK": set()}
        self.first_token_s = 0.0
        self.token_s = 0.0
        self.healthy = True
        self.running = 0
        self.waiting = 0
        # Failures asked for by /control "fail": (mode, count, after).
        self.fail_mode = None
        self.fail_count = 0
        self.fail_after = 0
        # What the OpenAI endpoints saw, by the request's X-Request-Id: its
        # headers, its body, the body bytes it sent back (as text), and
        # "aborted" once its client went away: where it was then
        # ("prefill", "decode" or "stream").
        self.seen = {}
        self.counters = {"tokenize": 0, "completions": 0, "dropped": 0,
                         "broken": 0, "client_gone": 0, "streams_done": 0}

    # -- block hashes, as vLLM chains them ---------------------------------

    def chain(self, tokens):
        """The engine hashes of the full blocks of `tokens`."""
        out, parent = [], b""
        bs = self.block_size
        for i in range(len(tokens) // bs):
            block = tokens[i * bs:(i + 1) * bs]
            digest = hashlib.sha256(parent + repr(block).encode()).digest()
            parent = digest
            if self.hashes == "bytes":
                out.append(digest)
            elif self.hashes == "int":  # VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES
                out.append(int.from_bytes(digest[-8:], "big"))
            else:  # Python's hash(): signed (SGLang)
                out.append(int.from_bytes(digest[-8:], "big", signed=True))
        return out

    # -- events in vLLM's layouts -------------------------------------------

    def stored(self, hashes, parent, tokens, medium):
        if self.layout == "array":
            return ["BlockStored", hashes, parent, tokens, self.block_size,
                    None, medium]
        # msgspec puts the tag first, then the fields in declaration order,
        # leaving out those equal to their defaults (extra_keys, group_idx).
        return {"type": "BlockStored", "block_hashes": hashes,
                "parent_block_hash": parent, "token_ids": tokens,
                "block_size": self.block_size, "lora_id": None,
                "medium": medium, "lora_name": None}

    def removed(self, hashes, medium):
        if self.layout == "array":
            return ["BlockRemoved", hashes, medium]
        return {"type": "BlockRemoved", "block_hashes": hashes,
                "medium": medium}

    def cleared(self):
        if self.layout == "array":
            return ["AllBlocksCleared"]
        return {"type": "AllBlocksCleared"}

    def batch(self, events):
        ts = time.time()
        if self.layout == "map":
            return {"ts": ts, "events": events, "data_parallel_rank": 0}
        return [ts, events, 0]

    def publish(self, events, drop=False):
        """Publishes one batch; `drop`: it is buffered for replay but never
        reaches the subscriber (a lost message)."""
        if self.pub is None:
            raise ValueError("no KV events without --pub-port")
        payload = msgpack.packb(self.batch(events), use_bin_type=True)
        seq = self.seq
        self.seq += 1
        self.buffer.append((seq, payload))
        if not drop:
            self.pub.send_multipart([self.topic, seq.to_bytes(8, "big"),
                                     payload])
        return seq

    def garbage(self, kind):
        if kind == "unknown_event":
            # A well-formed message whose event a newer engine might send.
            self.publish([["BlockUpdated", [1]]])
            return
        seq = self.seq.to_bytes(8, "big")
        frames = {
            "frames": [self.topic, seq],
            "sequence": [self.topic, b"\x01\x02\x03", b"\x90"],
            "msgpack": [self.topic, seq, b"\xc1\xc1"],
            "batch": [self.topic, seq, msgpack.packb("not a batch")],
        }[kind]
        # Undecodable: it takes no sequence number, the next message has it.
        self.pub.send_multipart(frames)

    # -- control -------------------------------------------------------------

    def control(self, cmd):
        op = cmd.get("op")
        with self.lock:
            if op == "store":
                return self.store(cmd["tokens"], cmd.get("medium", "GPU"),
                                  cmd.get("drop", False))
            if op == "remove":
                medium = cmd.get("medium", "GPU")
                have = [h for h in self.chain(cmd["tokens"])
                        if h in self.cached[medium]]
                last = cmd.get("last", len(have))
                gone = have[len(have) - last:] if last else []
                for h in gone:
                    self.cached[medium].discard(h)
                if gone:
                    self.publish([self.removed(gone, medium)],
                                 cmd.get("drop", False))
                return {"removed": len(gone)}
            if op == "clear":
                for s in self.cached.values():
                    s.clear()
                self.publish([self.cleared()], cmd.get("drop", False))
                return {}
            if op == "garbage":
                self.garbage(cmd["kind"])
                return {}
            if op == "layout":
                self.layout = cmd.get("layout", self.layout)
                self.hashes = cmd.get("hashes", self.hashes)
                return {}
            if op == "replay":
                self.replay_on = cmd["on"]
                return {}
            if op == "restart":
                # A new engine process: empty cache, numbering from 0.
                for s in self.cached.values():
                    s.clear()
                self.seq = 0
                self.buffer = []
                return {}
            if op == "delay":
                self.first_token_s = cmd.get("first_ms", 0) / 1000.0
                self.token_s = cmd.get("token_ms", 0) / 1000.0
                return {}
            if op == "health":
                self.healthy = cmd["up"]
                return {}
            if op == "state":
                return {m: len(s) for m, s in self.cached.items()} | {
                    "seq": self.seq}
            if op == "fail":
                # mode "drop": the next `count` completion requests are
                # read and their connection closed without a byte; mode
                # "mid_stream": the next `count` streams send `after`
                # events and then their connection is cut.
                self.fail_mode = cmd["mode"]
                self.fail_count = cmd.get("count", 1)
                self.fail_after = cmd.get("after", 1)
                return {}
            if op == "stats":
                return dict(self.counters) | {"waiting": self.waiting,
                                              "running": self.running}
            if op == "seen":
                return self.seen.get(cmd["id"], {})
        raise ValueError(f"unknown op {op!r}")

    def take_failure(self, stream):
        """The failure this request is to suffer, if any (under lock)."""
        if self.fail_count <= 0:
            return None
        if self.fail_mode == "mid_stream" and not stream:
            return None
        self.fail_count -= 1
        return self.fail_mode

    def count(self, name):
        with self.lock:
            self.counters[name] += 1

    def store(self, tokens, medium, drop):
        hashes = self.chain(tokens)
        have = self.cached[medium]
        new = [i for i, h in enumerate(hashes) if h not in have]
        if not new:
            return {"stored": 0}
        # vLLM stores the blocks after its cached prefix in one event, the
        # parent being the last cached one.
        first = new[0]
        parent = hashes[first - 1] if first > 0 else None
        bs = self.block_size
        fresh = hashes[first:]
        have.update(fresh)
        self.publish([self.stored(fresh, parent,
                                  tokens[first * bs:len(hashes) * bs],
                                  medium)], drop)
        return {"stored": len(fresh)}

    def serve_replay(self):
        """vLLM's replay protocol: [id, "", start] in; [id, "", seq,
        payload] for each buffered batch from start, then [id, "", END, ""]."""
        poller = zmq.Poller()
        poller.register(self.replay, zmq.POLLIN)
        while True:
            if not dict(poller.poll(100)):
                continue
            frames = self.replay.recv_multipart()
            if len(frames) != 3 or not self.replay_on:
                continue
            ident, _, start = frames
            start = int.from_bytes(start, "big")
            with self.lock:
                out = [(s, p) for s, p in self.buffer if s >= start]
            for s, p in out:
                self.replay.send_multipart([ident, b"", s.to_bytes(8, "big"),
                                            p])
            self.replay.send_multipart([ident, b"", END_SEQ, b""])


ENGINE = None


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def reply(self, status, body, ctype="application/json"):
        data = body.encode() if isinstance(body, str) else body
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        e = ENGINE
        if self.path == "/health":
            self.reply(200 if e.healthy else 503, "")
        elif self.path == "/metrics":
            self.reply(200, (
                "# TYPE vllm:num_requests_running gauge\n"
                f'vllm:num_requests_running{{engine="0",model_name="m"}} '
                f"{e.running}.0\n"
                f'vllm:num_requests_waiting{{engine="0",model_name="m"}} '
                f"{e.waiting}.0\n"
                f'vllm:kv_cache_usage_perc{{engine="0",model_name="m"}} '
                f'{len(e.cached["GPU"]) / e.args.gpu_blocks}\n'
                f'vllm:cache_config_info{{block_size="{e.block_size}",'
                f'engine="0",num_gpu_blocks="{e.args.gpu_blocks}"}} 1.0\n'),
                "text/plain; version=0.0.4")
        elif self.path == "/v1/models":
            self.reply(200, json.dumps({"object": "list", "data": [
                {"id": "standin", "object": "model"}]}))
        else:
            self.reply(404, json.dumps({"error": "no such path"}))

    def do_POST(self):
        e = ENGINE
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if self.path == "/control":
            try:
                out = e.control(json.loads(body))
            except (KeyError, ValueError) as err:
                self.reply(400, json.dumps({"error": str(err)}))
                return
            self.reply(200, json.dumps(out))
            return
        if self.path == "/tokenize":
            self.tokenize(body)
            return
        if self.path not in ("/v1/completions", "/v1/chat/completions"):
            self.reply(404, json.dumps({"error": "no such path"}))
            return
        try:
            req = json.loads(body)
        except ValueError:
            self.reply(400, json.dumps({"error": {"message": "bad JSON"}}))
            return
        if "prompt" not in req and "messages" not in req:
            self.reply(400, json.dumps({"error": {"message": "no prompt"}}))
            return
        chat = self.path.endswith("chat/completions")
        tokens = int(req.get("max_tokens", 4))
        rid = self.headers.get("X-Request-Id", "")
        record = {"headers": {k.lower(): v for k, v in self.headers.items()},
                  "body": body.decode("utf-8", "replace"), "sent": ""}
        with e.lock:
            e.counters["completions"] += 1
            if rid:
                e.seen[rid] = record
            failure = e.take_failure(bool(req.get("stream")))
        if failure == "drop":
            # Read, then gone without a byte: an engine that died.
            e.count("dropped")
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        if e.args.store_prompts and e.pub is not None:
            # As vLLM with prefix caching: the prompt's full blocks are
            # cached once prefilled, and announced as KV events.
            ids = prompt_ids(req)
            if ids:
                with e.lock:
                    e.store(ids, "GPU", False)
        with e.lock:
            e.waiting += 1
        # Queued and prefilled, unless the client goes meanwhile.
        alive = self.wait_for_client(e.first_token_s, record, "prefill")
        with e.lock:
            e.waiting -= 1
            if alive:
                e.running += 1
        if not alive:
            return
        try:
            if req.get("stream"):
                usage = bool((req.get("stream_options") or {}).get(
                    "include_usage"))
                self.stream(chat, tokens, usage, record,
                            failure == "mid_stream")
            else:
                if not self.wait_for_client(e.token_s * max(tokens - 1, 0),
                                            record, "decode"):
                    return
                text = "".join(piece(i) for i in range(tokens))
                choice = ({"index": 0, "message": {"role": "assistant",
                                                   "content": text},
                           "finish_reason": "length"} if chat else
                          {"index": 0, "text": text, "finish_reason": "length"})
                out = json.dumps({
                    "id": "cmpl-standin", "object": "chat.completion"
                    if chat else "text_completion", "model": "standin",
                    "choices": [choice], "usage": {"completion_tokens":
                                                   tokens}},
                    ensure_ascii=False)
                record["sent"] = out
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("X-Standin", "answered")
                data = out.encode()
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
        finally:
            with e.lock:
                e.running -= 1

    def tokenize(self, body):
        """vLLM's /tokenize, with the stand-in's byte tokenizer."""
        e = ENGINE
        e.count("tokenize")
        try:
            req = json.loads(body)
            text = render(req)
        except (ValueError, KeyError, TypeError) as err:
            self.reply(400, json.dumps({"object": "error", "message":
                                        f"cannot tokenize: {err}",
                                        "type": "BadRequestError",
                                        "param": None, "code": 400}))
            return
        tokens = [b + 1000 for b in text.encode("utf-8")]
        self.reply(200, json.dumps({"count": len(tokens), "max_model_len":
                                    4096, "tokens": tokens}))

    def client_gone(self):
        """Whether the client closed its connection (readable at EOF)."""
        try:
            readable, _, _ = select.select([self.connection], [], [], 0)
            if readable and self.connection.recv(1, socket.MSG_PEEK) == b"":
                return True
        except OSError:
            return True
        return False

    def wait_for_client(self, seconds, record, where):
        """Waits `seconds` as long as the client stays; False (the request
        aborted, as vLLM aborts one whose connection closed) when it goes."""
        deadline = time.monotonic() + seconds
        while True:
            if self.client_gone():
                self.aborted(record, where)
                return False
            left = deadline - time.monotonic()
            if left <= 0:
                return True
            time.sleep(min(left, 0.01))

    def aborted(self, record, where):
        ENGINE.count("client_gone")
        record["aborted"] = where
        self.close_connection = True

    def stream(self, chat, tokens, usage, record, cut):
        """Server-sent events as vLLM sends them, one token per chunk;
        `cut`: the connection dies after ENGINE.fail_after of them."""
        e = ENGINE
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("X-Standin", "streamed")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        sent = []

        def chunk(data):
            raw = data.encode()
            self.wfile.write(f"{len(raw):x}\r\n".encode() + raw + b"\r\n")
            self.wfile.flush()
            sent.append(data)
            record["sent"] = "".join(sent)

        try:
            for i in range(tokens):
                if cut and i == e.fail_after:
                    e.count("broken")
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                # A token's time, cut short when the client goes.
                if i > 0 and not self.wait_for_client(e.token_s, record,
                                                      "stream"):
                    return
                delta = ({"index": 0, "delta": {"content": piece(i)}} if chat
                         else {"index": 0, "text": piece(i)})
                chunk("data: " + json.dumps({"id": "cmpl-standin",
                                             "choices": [delta]},
                                            ensure_ascii=False) + "\n\n")
            if usage:
                chunk("data: " + json.dumps({"id": "cmpl-standin",
                                             "choices": [], "usage": {
                                                 "completion_tokens": tokens
                                             }}) + "\n\n")
            chunk("data: [DONE]\n\n")
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
            e.count("streams_done")
        except (BrokenPipeError, ConnectionResetError):
            self.aborted(record, "stream")


def piece(i):
    """The i-th output token's text: not all ASCII, so that a relay that
    re-encodes would show."""
    return f" tok{i}" if i % 3 else f" t\u00e9{i}"


def prompt_ids(req):
    """The token ids of a completion body, as /tokenize gives them: a
    prompt of ids as it is, text and messages by the byte tokenizer."""
    prompt = req.get("prompt")
    if isinstance(prompt, list) and prompt and isinstance(prompt[0], int):
        return prompt
    try:
        return [b + 1000 for b in render(req).encode("utf-8")]
    except (KeyError, TypeError):
        return []


def render(req):
    """The text the stand-in's template makes of a /tokenize body."""
    if "messages" in req:
        out = []
        for m in req["messages"]:
            content = m.get("content") or ""
            if isinstance(content, list):
                content = "".join(p["text"] for p in content
                                  if p.get("type") == "text")
            out.append(f"<|{m['role']}|>{content}\n")
        if req.get("add_generation_prompt", True):
            out.append("<|assistant|>")
        return "".join(out)
    prompt = req["prompt"]
    if not isinstance(prompt, str):
        raise TypeError("prompt must be a string")
    return prompt


def main():
    global ENGINE
    p = argparse.ArgumentParser()
    p.add_argument("--pub-port", type=int, default=0)
    p.add_argument("--replay-port", type=int, default=0)
    p.add_argument("--http-port", type=int, required=True)
    p.add_argument("--block-size", type=int, default=4)
    p.add_argument("--topic", default="")
    p.add_argument("--layout", choices=["array", "mixed", "map"],
                   default="map")
    p.add_argument("--hashes", choices=["bytes", "int", "sint"],
                   default="bytes")
    p.add_argument("--gpu-blocks", type=int, default=1000)
    p.add_argument("--store-prompts", action="store_true",
                   help="cache each completion's prompt blocks and publish "
                        "them as KV events, as vLLM does")
    args = p.parse_args()
    ENGINE = Engine(args)
    if ENGINE.replay is not None:
        threading.Thread(target=ENGINE.serve_replay, daemon=True).start()
    server = ThreadingHTTPServer(("127.0.0.1", args.http_port), Handler)
    server.daemon_threads = True
    print(f"ready http_port={server.server_address[1]}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
