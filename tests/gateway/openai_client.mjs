// The official OpenAI SDK against `kvmesh gateway`: chat and completions,
// streaming and not, /v1/models, an unknown model, and a conversation whose
// second turn must land on the GPU that holds its first. Prints one JSON
// line of what it saw; exits 1 on the first check that fails.
// usage: node openai_client.mjs NPM_DIR BASE_URL MODEL
// (NPM_DIR: tests/npm, where the SDK is installed from the lock file)
import { createRequire } from "node:module";
import { pathToFileURL } from "node:url";

const [npmDir, baseURL, model] = process.argv.slice(2);
const require = createRequire(`${npmDir}/package.json`);
const { default: OpenAI } = await import(
  pathToFileURL(require.resolve("openai")).href);
const client = new OpenAI({ baseURL, apiKey: "none", maxRetries: 0 });
const seen = {};

function check(what, cond, detail) {
  if (!cond) {
    console.error(`FAIL ${what}: ${JSON.stringify(detail)}`);
    process.exit(1);
  }
  console.error(`ok ${what}`);
}

const models = await client.models.list();
const ids = models.data.map((m) => m.id);
check("models_listed", ids.includes(model), ids);

const chat = await client.chat.completions
  .create({ model, messages: [{ role: "user", content: "Hello there" }],
            max_tokens: 5 })
  .withResponse();
check("chat", chat.data.choices[0].message.content.length > 0, chat.data);
seen.chat_worker = chat.response.headers.get("x-kvmesh-worker");

let text = "";
let usage = null;
const stream = await client.chat.completions.create({
  model, messages: [{ role: "user", content: "Stream to me" }],
  max_tokens: 6, stream: true, stream_options: { include_usage: true } });
for await (const c of stream) {
  if (c.choices.length > 0) text += c.choices[0].delta.content ?? "";
  if (c.usage) usage = c.usage;
}
check("chat_stream", text.length > 0 && usage !== null, { text, usage });

const done = await client.completions.create({ model, prompt: "Once upon",
                                               max_tokens: 3 });
check("completion", done.choices[0].text.length > 0, done);

let ctext = "";
const cstream = await client.completions.create({ model, prompt: [1, 2, 3, 4, 5],
                                                  max_tokens: 4, stream: true });
for await (const c of cstream) ctext += c.choices[0]?.text ?? "";
check("completion_stream", ctext.length > 0, ctext);

// A conversation: its second turn repeats the first turn's whole prompt.
const system = { role: "system",
                 content: "You are a careful assistant. ".repeat(20) };
const turn1 = [system, { role: "user", content: "What is a KV cache?" }];
const a1 = await client.chat.completions
  .create({ model, messages: turn1, max_tokens: 4 }).withResponse();
const turn2 = [...turn1, a1.data.choices[0].message,
               { role: "user", content: "And prefix caching?" }];
const a2 = await client.chat.completions
  .create({ model, messages: turn2, max_tokens: 4 }).withResponse();
seen.turn1_worker = a1.response.headers.get("x-kvmesh-worker");
seen.turn2_worker = a2.response.headers.get("x-kvmesh-worker");
check("second_turn_on_the_first_turns_gpu",
      seen.turn1_worker !== null && seen.turn1_worker === seen.turn2_worker,
      seen);

try {
  await client.chat.completions.create({
    model: "no-such-model", messages: [{ role: "user", content: "hi" }] });
  check("unknown_model_is_404", false, "answered");
} catch (e) {
  check("unknown_model_is_404", e.status === 404, { status: e.status,
                                                   message: e.message });
}

console.log(JSON.stringify(seen));
