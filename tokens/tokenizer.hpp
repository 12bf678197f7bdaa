// An in-process Hugging Face tokenizer: a model's tokenizer.json read once,
// then the exact token ids HF tokenizers' encode() gives, or a load error.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.hpp"

namespace kvmesh {

// What a tokenizer.json may say, and nothing more (anything else fails the
// load with an error naming it, so that ids are never approximate):
// - model: BPE over the byte-level alphabet, merges as "a b" strings or
//   [a, b] arrays, ignore_merges; no dropout, unk_token, byte_fallback,
//   fuse_unk, continuing_subword_prefix or end_of_word_suffix ("" allowed).
// - added_tokens: special or not, matched in the text before anything else
//   (leftmost, then longest), whether or not special tokens are added;
//   lstrip, rstrip, single_word and normalized must be false.
// - normalizer: null or NFC.
// - pre_tokenizer: Sequence of one Split (a Regex pattern, Isolated, not
//   inverted; see split_regex.hpp for the regex syntax taken) and then
//   ByteLevel (add_prefix_space and use_regex false).
// - post_processor: null, ByteLevel, TemplateProcessing (its single
//   template), or a Sequence of those.
// - truncation and padding null; decoder ignored.
// Text must be valid UTF-8 (HF takes only Unicode strings): encode refuses
// anything else with an error.
class tokenizer {
 public:
  static expected<tokenizer> from_json(std::string_view tokenizer_json);
  static expected<tokenizer> load(const std::string& path);  // reads the file

  // Token ids of `text`, as HF tokenizers' encode(text, add_special_tokens)
  // gives them, into `out` (cleared first). Added and special tokens written
  // in the text are always matched as HF does; add_special_tokens applies
  // the post_processor's template (Llama 3's BOS). Errors: invalid UTF-8
  // (the message gives the byte offset), a regex resource limit.
  status encode(std::string_view text, bool add_special_tokens,
                std::vector<uint32_t>& out) const;

  // The id of a token as tokenizer.json writes it (vocab or added token).
  std::optional<uint32_t> token_id(std::string_view token) const;
  // Whether `token` is one of the added tokens, matched in the text before
  // anything else (transformers makes every special token one).
  bool is_added(std::string_view token) const;

  // A one-line description of the model family for the gateway's start log.
  std::string describe() const;

  struct impl;

 private:
  tokenizer() = default;
  std::shared_ptr<const impl> impl_;
};

}  // namespace kvmesh
