// `kvmesh hash`: prints the Dynamo-compatible block hashes of a token list.
#include <cinttypes>
#include <cstdio>
#include <string>
#include <vector>

#include "cli/commands.hpp"
#include "core/block_hash.hpp"

namespace kvmesh::cli {

expected<std::vector<uint32_t>> parse_token_list(const std::string& text) {
  std::vector<uint32_t> out;
  if (text.empty())
    return make_error(ec::empty_input, "--tokens: the token list is empty");
  size_t pos = 0;
  while (true) {
    const size_t comma = text.find(',', pos);
    const std::string item = text.substr(
        pos, comma == std::string::npos ? std::string::npos : comma - pos);
    size_t used = 0;
    unsigned long long v = 0;
    bool good = !item.empty() && item[0] >= '0' && item[0] <= '9';
    if (good) {
      try {
        v = std::stoull(item, &used, 10);
      } catch (const std::exception&) {
        good = false;
      }
    }
    if (!good || used != item.size() || v > UINT32_MAX)
      return make_error(ec::parse_error,
                        "--tokens: entry " + std::to_string(out.size() + 1) +
                            " '" + item +
                            "' is not a token id (0..4294967295)");
    out.push_back(static_cast<uint32_t>(v));
    if (comma == std::string::npos) return out;
    pos = comma + 1;
  }
}

namespace {

struct hash_options {
  uint32_t block_tokens = 0;
  std::string tokens;
  std::string salt;
};

int run_hash(const hash_options& opt) {
  auto tokens = parse_token_list(opt.tokens);
  if (!tokens) {
    std::fprintf(stderr, "kvmesh hash: %s\n", tokens.err().message.c_str());
    return 2;
  }
  auto hashes = hash_blocks(*tokens, opt.block_tokens, opt.salt);
  if (!hashes) {
    std::fprintf(stderr, "kvmesh hash: %s\n", hashes.err().message.c_str());
    return 2;
  }
  if (hashes->empty())
    std::fprintf(stderr,
                 "kvmesh hash: %zu tokens make no full block of %u tokens\n",
                 tokens->size(), opt.block_tokens);
  for (const auto& h : *hashes)
    std::printf("%016" PRIx64 " %016" PRIx64 "\n", h.local, h.seq);
  return 0;
}

}  // namespace

void add_hash(CLI::App& app, std::function<int()>& run) {
  auto opt = std::make_shared<hash_options>();
  auto* cmd = app.add_subcommand(
      "hash", "print each full block's local and sequence hash (Dynamo's)");
  cmd->add_option("--block-tokens", opt->block_tokens, "tokens per block")
      ->required()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--tokens", opt->tokens, "token ids, comma-separated")
      ->required();
  cmd->add_option("--salt", opt->salt, "salt or LoRA name (changes the seed)");
  cmd->callback([opt, &run] { run = [opt] { return run_hash(*opt); }; });
}

}  // namespace kvmesh::cli
