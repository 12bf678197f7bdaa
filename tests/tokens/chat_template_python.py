# Chat template cross-check: renders the reference's conversations with
# Python's Jinja2 set up as transformers' apply_chat_template sets it up
# (the engine's own renderer), to tell where @huggingface/jinja departs
# from it. Optional: tests/tokens/chat_template_test.sh runs it when a
# python3 with jinja2 >= 3.1 is there.
#
# usage: python3 chat_template_python.py REF.jsonl OUT.jsonl
# OUT has one {"rendered" | "error"} line per conversation of REF.
import json
import sys
from datetime import datetime

import jinja2
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment


class AssistantTracker(Extension):
    # transformers' {% generation %}: renders its body.
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(
            self.call_method("_render", []), [], [], body
        ).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def main():
    ref, out = sys.argv[1], sys.argv[2]
    with open(ref, encoding="utf-8") as f:
        header = json.loads(f.readline())
        lines = [json.loads(l) for l in f]
    now = datetime.fromtimestamp(header["now"])

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent,
                          separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt):
        return now.strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[AssistantTracker, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    compiled = {k: env.from_string(v) for k, v in header["templates"].items()}
    with open(out, "w", encoding="utf-8") as f:
        for line in lines:
            try:
                r = {"rendered": compiled[line["template"]].render(**line["context"])}
            except Exception as e:  # noqa: BLE001 - any raise is the answer
                r = {"error": f"{type(e).__name__}: {e}"}
            f.write(json.dumps(r, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
