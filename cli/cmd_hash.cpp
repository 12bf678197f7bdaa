// `kvmesh hash`: prints the Dynamo-compatible block hashes of a token list.
#include <cinttypes>
#include <cstdio>
#include <string>
#include <vector>

#include "cli/commands.hpp"
#include "cli/number_flags.hpp"
#include "core/block_hash.hpp"

namespace kvmesh::cli {

namespace {

struct hash_options {
  uint32_t block_tokens = default_block_tokens;
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
      ->check(positive)
      ->capture_default_str();
  cmd->add_option("--tokens", opt->tokens, "token ids, comma-separated")
      ->required();
  cmd->add_option("--salt", opt->salt, "salt or LoRA name (changes the seed)");
  cmd->callback([opt, &run] { run = [opt] { return run_hash(*opt); }; });
}

}  // namespace kvmesh::cli
