// Completion scripts and the man page from the flag table (completion.hpp).
#include "cli/completion.hpp"

#include <functional>

namespace kvmesh::cli {

namespace {

// Every command path below the root, " hash", " config check", with its
// node, depth first.
void walk(
    const command_doc& c, const std::string& path,
    const std::function<void(const std::string&, const command_doc&)>& f) {
  f(path, c);
  for (const auto& s : c.commands)
    walk(s, path + " " + s.name, f);
}

std::string words_of(const command_doc& c) {
  std::string w;
  for (const auto& s : c.commands)
    w += (w.empty() ? "" : " ") + s.name;
  for (const auto& f : c.flags)
    w += (w.empty() ? "" : " ") + f.name;
  return w;
}

// A roff text line: backslashes and hyphens escaped, a leading dot or
// quote defused.
std::string roff(const std::string& s) {
  std::string out;
  for (char ch : s) {
    if (ch == '\\')
      out += "\\e";
    else if (ch == '-')
      out += "\\-";
    else
      out += ch;
  }
  if (!out.empty() && (out[0] == '.' || out[0] == '\'')) out = "\\&" + out;
  return out;
}

}  // namespace

std::string bash_completion(const command_doc& root) {
  std::string paths, words, valued;
  walk(root, "", [&](const std::string& path, const command_doc& c) {
    if (!path.empty()) paths += "    \"" + path + "\") path=$next ;;\n";
    words += "    \"" + path + "\") words=\"" + words_of(c) + "\" ;;\n";
    for (const auto& f : c.flags)
      if (!f.value.empty())
        valued += "    \"" + path + " " + f.name + "\") valued=1 ;;\n";
  });
  return "# bash completion for " + root.name + " (`" + root.name +
         " completion bash`): commands, their flags, file names after a\n"
         "# flag that takes a value.\n"
         "_" +
         root.name +
         "() {\n"
         "  local cur=${COMP_WORDS[COMP_CWORD]} prev path=\"\" next w i\n"
         "  local words valued=0\n"
         "  for ((i = 1; i < COMP_CWORD; i++)); do\n"
         "    w=${COMP_WORDS[i]}\n"
         "    next=\"$path $w\"\n"
         "    case \"$next\" in\n" +
         paths +
         "    esac\n"
         "  done\n"
         "  if ((COMP_CWORD > 1)); then\n"
         "    prev=${COMP_WORDS[COMP_CWORD - 1]}\n"
         "    case \"$path $prev\" in\n" +
         valued +
         "    esac\n"
         "  fi\n"
         "  if ((valued)) && [[ $cur != -* ]]; then\n"
         "    compopt -o filenames 2>/dev/null\n"
         "    COMPREPLY=($(compgen -f -- \"$cur\"))\n"
         "    return\n"
         "  fi\n"
         "  case \"$path\" in\n" +
         words +
         "    *) words=\"\" ;;\n"
         "  esac\n"
         "  COMPREPLY=($(compgen -W \"$words\" -- \"$cur\"))\n"
         "}\n"
         "complete -F _" +
         root.name + " " + root.name + "\n";
}

std::string zsh_completion(const command_doc& root) {
  return "#compdef " + root.name + "\n# zsh completion for " + root.name +
         " (`" + root.name +
         " completion zsh`): the bash completion under bashcompinit.\n"
         "(( $+functions[compdef] )) || { autoload -U +X compinit && "
         "compinit -u; }\n"
         "autoload -U +X bashcompinit && bashcompinit\n" +
         bash_completion(root);
}

std::string man_page(const command_doc& root, const std::string& version) {
  std::string upper;
  for (char ch : root.name)
    upper += static_cast<char>(ch >= 'a' && ch <= 'z' ? ch - 32 : ch);
  std::string out = ".TH " + upper + " 1 \"\" \"" + roff(version) +
                    "\" \"User Commands\"\n.SH NAME\n" + roff(root.name) +
                    " \\- " + roff(root.help) + "\n.SH SYNOPSIS\n.B " +
                    roff(root.name) +
                    "\n\\fICOMMAND\\fR [\\fIOPTIONS\\fR]\n.SH COMMANDS\n";
  walk(root, "", [&](const std::string& path, const command_doc& c) {
    if (path.empty()) return;
    out += ".SS \"" + roff(root.name + path) + "\"\n" + roff(c.help) + "\n";
    for (const auto& f : c.flags) {
      out += ".TP\n.B " + roff(f.name);
      if (!f.value.empty()) out += " \\fI" + roff(f.value) + "\\fR";
      out += "\n" + roff(f.help);
      if (!f.default_value.empty())
        out += " (default: " + roff(f.default_value) + ")";
      out += "\n";
    }
  });
  out +=
      ".SH EXIT STATUS\n0: done; 1: the command could not do its job (no "
      "server, no answer); 2: a bad flag or value.\n"
      ".SH ENVIRONMENT\nEvery flag of the mesh's commands may also come from "
      "a KVMESH_* variable or the \\-\\-config file; "
      "\\fBkvmesh config docs\\fR lists them.\n";
  return out;
}

}  // namespace kvmesh::cli
