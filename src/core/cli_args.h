#pragma once
// Minimal `--flag value` / `--flag` / positional argument parsing for the fathom subcommands.
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace fathom {

class CliArgs {
 public:
  // value_flags take a value (`--model DIR` or `--model=DIR`); bool_flags take none.
  // Unknown flags or a missing value throw fathom::Error naming the flag.
  CliArgs(const std::vector<std::string>& args, const std::set<std::string>& value_flags,
          const std::set<std::string>& bool_flags);

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

// "1,2,3" -> {1,2,3}; throws on a non-integer element, naming the flag.
std::vector<int64_t> parse_int_list(const std::string& text, const std::string& flag_name);

}  // namespace fathom
