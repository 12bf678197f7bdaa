// Shell completion scripts (bash, zsh) and the man page, made from the
// commands' flag table as plain data: one source for --help, completion
// and kvmesh(1).
#pragma once

#include <string>
#include <vector>

namespace kvmesh::cli {

struct flag_doc {
  std::string name;   // --block-tokens
  std::string value;  // what it takes ("UINT", "TEXT"); "" for a switch
  std::string help;
  std::string default_value;  // "" when none is shown
};

struct command_doc {
  std::string name;  // "gateway"; the root is "kvmesh"
  std::string help;
  std::vector<flag_doc> flags;
  std::vector<command_doc> commands;
};

// A bash completion script: command words, then each command's flags;
// after a flag that takes a value, file names.
std::string bash_completion(const command_doc& root);
// zsh: the bash script under zsh's bashcompinit.
std::string zsh_completion(const command_doc& root);
// kvmesh(1) in roff (man -l renders it).
std::string man_page(const command_doc& root, const std::string& version);

}  // namespace kvmesh::cli
