// The independent reference for the gateway's in-process tokenizer: the
// ids vLLM's POST /tokenize gives for an OpenAI body, from a model
// directory's Hugging Face files, rendered by @huggingface/jinja and
// encoded by @huggingface/tokenizers (tests/npm).
//
// usage: node tokenize_reference.mjs NPM_MODULES CASES.json
// CASES.json: [{"dir", "api": "chat" | "completions", "body", "parts"}]
// Prints one JSON array, per case {"ids": [...]} or {"error": "..."}.
//
// What vLLM does, written out again here from its source (renderers/hf.py,
// renderers/chat_utils, serve/tokenize/protocol.py), not from kvmesh's:
// - chat: the template is DIR/chat_template.jinja, else tokenizer_config's
//   chat_template (a string, or the one named "default" of a list). Each
//   message becomes {role, content, tool_call_id (a tool's), name}: the
//   content a string (text parts joined by "\n", null as ""), or, for a
//   template that loops over content ("parts": true), a list of
//   {type: "text", text} (a tool's content stays a string). The variables:
//   messages, tools and documents null, add_generation_prompt (true unless
//   the body says), tokenizer_config's special tokens, then the body's
//   chat_template_kwargs (its add_generation_prompt overridden). The text
//   is encoded without special tokens unless add_special_tokens is true.
// - completions: the prompt (the first of a list) encoded with special
//   tokens unless add_special_tokens is false.
import fs from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";
import { pathToFileURL } from "node:url";

const [npm, casesFile] = process.argv.slice(2);
if (!npm || !casesFile) {
  console.error("usage: node tokenize_reference.mjs NPM_MODULES CASES.json");
  process.exit(2);
}
const entry = createRequire(path.join(npm, "..", "package.json"))
  .resolve("@huggingface/tokenizers").replace(/\.cjs$/, ".mjs");
const { Tokenizer } = await import(pathToFileURL(entry).href);
const { Template } = await import(
  pathToFileURL(path.join(npm, "@huggingface", "jinja", "dist", "index.js")).href);

const readJson = (f) => JSON.parse(fs.readFileSync(f, "utf8"));
// A vocabulary takes seconds to load: one per tokenizer.json file and
// config (the chat template aside).
const tokenizers = new Map();
function tokenizerOf(dir, config) {
  const { chat_template, ...rest } = config;
  const key = fs.realpathSync(path.join(dir, "tokenizer.json")) + JSON.stringify(rest);
  if (!tokenizers.has(key))
    tokenizers.set(key, new Tokenizer(readJson(path.join(dir, "tokenizer.json")), config));
  return tokenizers.get(key);
}
const models = new Map();
function model(dir) {
  if (!models.has(dir)) {
    const config = readJson(path.join(dir, "tokenizer_config.json"));
    const tokenizer = tokenizerOf(dir, config);
    const jinja = path.join(dir, "chat_template.jinja");
    let source = config.chat_template;
    if (fs.existsSync(jinja)) source = fs.readFileSync(jinja, "utf8");
    else if (Array.isArray(source)) source = source.find((t) => t.name === "default").template;
    const special = {};
    for (const key of ["bos_token", "eos_token", "unk_token", "sep_token",
      "pad_token", "cls_token", "mask_token"]) {
      const v = config[key];
      if (v != null) special[key] = typeof v === "string" ? v : v.content;
    }
    if (Array.isArray(config.additional_special_tokens))
      special.additional_special_tokens = config.additional_special_tokens.map(
        (v) => (typeof v === "string" ? v : v.content));
    models.set(dir, { tokenizer, template: source ? new Template(source) : null, special });
  }
  return models.get(dir);
}

function conversation(messages, parts) {
  return messages.map((m) => {
    let texts = [];
    if (typeof m.content === "string") texts = [m.content];
    else if (Array.isArray(m.content)) texts = m.content.map((p) => p.text);
    const out = { role: m.role };
    out.content = parts && m.role !== "tool"
      ? texts.map((text) => ({ type: "text", text }))
      : texts.join("\n");
    if (m.role === "tool" && "tool_call_id" in m) out.tool_call_id = m.tool_call_id;
    if (typeof m.name === "string") out.name = m.name;
    return out;
  });
}

function ids(c) {
  const { tokenizer, template, special } = model(c.dir);
  const b = c.body;
  if (c.api === "completions") {
    const prompt = Array.isArray(b.prompt) ? b.prompt[0] : b.prompt;
    return tokenizer.encode(prompt, { add_special_tokens: b.add_special_tokens ?? true }).ids;
  }
  const context = {
    messages: conversation(b.messages, c.parts),
    tools: null,
    documents: null,
    add_generation_prompt: b.add_generation_prompt ?? true,
    ...special,
  };
  for (const [k, v] of Object.entries(b.chat_template_kwargs ?? {}))
    if (k !== "add_generation_prompt" && k !== "continue_final_message") context[k] = v;
  const text = template.render(context);
  return tokenizer.encode(text, { add_special_tokens: b.add_special_tokens ?? false }).ids;
}

const out = readJson(casesFile).map((c) => {
  try {
    return { ids: ids(c) };
  } catch (e) {
    return { error: String(e.message ?? e) };
  }
});
process.stdout.write(JSON.stringify(out));
