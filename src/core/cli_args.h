#pragma once
// Minimal `--flag value` / `--flag` / positional argument parsing for the fathom subcommands.
#include <exception>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace fathom {

// Thrown by CliArgs for `--help` / `-h`: what() lists the command's flags, for the caller to print (exit 0).
class HelpRequested : public std::exception {
 public:
  explicit HelpRequested(std::string flags_text) : flags_text_(std::move(flags_text)) {}
  const char* what() const noexcept override { return flags_text_.c_str(); }

 private:
  std::string flags_text_;
};

// One line per flag for --help: "--port" -> "N: the port to listen on (30000)".
using FlagDescriptions = std::map<std::string, std::string>;

class CliArgs {
 public:
  // value_flags take a value (`--model DIR` or `--model=DIR`); bool_flags take none.
  // Unknown flags or a missing value throw fathom::Error naming the flag (and listing the valid ones);
  // `--help` / `-h` throws HelpRequested: the flags' names, or with `descriptions` one described flag per line.
  CliArgs(const std::vector<std::string>& args, const std::set<std::string>& value_flags,
          const std::set<std::string>& bool_flags, const FlagDescriptions& descriptions = {});

  bool has(const std::string& flag) const;
  std::optional<std::string> get(const std::string& flag) const;
  std::string get_or(const std::string& flag, const std::string& fallback) const;
  std::string require(const std::string& flag) const;
  int64_t get_int_or(const std::string& flag, int64_t fallback) const;
  double get_double_or(const std::string& flag, double fallback) const;
  const std::vector<std::string>& positional() const { return positional_; }

 private:
  std::map<std::string, std::string> values_;
  std::set<std::string> present_bools_;
  std::vector<std::string> positional_;
};

// "1,2,3" -> {1,2,3}; throws on a non-integer or out-of-int64-range element, naming the flag.
std::vector<int64_t> parse_int_list(const std::string& text, const std::string& flag_name);

// Other spellings of flags (SGLang's, e.g. --model-path -> --model), in both "--name value" and "--name=value" form.
std::vector<std::string> rename_flags(const std::vector<std::string>& args,
                                      const std::map<std::string, std::string>& aliases);

// Opens `path` for writing (appending when `append`); throws naming `flag`, the path and errno when it can't.
std::ofstream open_output_file(const std::string& path, const std::string& flag, bool append = false);
// Flushes `out`; throws when any write to it failed (full disk), so lost output never exits 0.
void finish_output_file(std::ofstream& out, const std::string& path, const std::string& flag);
// Flushes stdout; throws when any write to it failed (redirected to a full disk), so lost output never exits 0.
void flush_stdout();

}  // namespace fathom
