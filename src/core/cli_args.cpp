#include "core/cli_args.h"

#include <cstdlib>

#include "core/error.h"

namespace fathom {

CliArgs::CliArgs(const std::vector<std::string>& args, const std::set<std::string>& value_flags,
                 const std::set<std::string>& bool_flags) {
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg.rfind("--", 0) != 0 || arg == "--") {
      positional_.push_back(arg);
      continue;
    }
    std::string name = arg;
    std::optional<std::string> inline_value;
    if (auto eq = arg.find('='); eq != std::string::npos) {
      name = arg.substr(0, eq);
      inline_value = arg.substr(eq + 1);
    }
    if (value_flags.count(name)) {
      if (inline_value) {
        values_[name] = *inline_value;
      } else {
        FATHOM_CHECK(i + 1 < args.size(), "flag " << name << " needs a value");
        values_[name] = args[++i];
      }
    } else if (bool_flags.count(name)) {
      FATHOM_CHECK(!inline_value, "flag " << name << " takes no value");
      present_bools_.insert(name);
    } else {
      FATHOM_FAIL("unknown flag " << name);
    }
  }
}

bool CliArgs::has(const std::string& flag) const {
  return present_bools_.count(flag) || values_.count(flag);
}

std::optional<std::string> CliArgs::get(const std::string& flag) const {
  auto it = values_.find(flag);
  if (it == values_.end()) return std::nullopt;
  return it->second;
}

std::string CliArgs::get_or(const std::string& flag, const std::string& fallback) const {
  auto value = get(flag);
  return value ? *value : fallback;
}

std::string CliArgs::require(const std::string& flag) const {
  auto value = get(flag);
  FATHOM_CHECK(value.has_value(), "missing required flag " << flag);
  return *value;
}

int64_t CliArgs::get_int_or(const std::string& flag, int64_t fallback) const {
  auto value = get(flag);
  if (!value) return fallback;
  char* end = nullptr;
  long long parsed = std::strtoll(value->c_str(), &end, 10);
  FATHOM_CHECK(!value->empty() && end && *end == '\0', "flag " << flag << " expects an integer, got '" << *value << "'");
  return parsed;
}

double CliArgs::get_double_or(const std::string& flag, double fallback) const {
  auto value = get(flag);
  if (!value) return fallback;
  char* end = nullptr;
  double parsed = std::strtod(value->c_str(), &end);
  FATHOM_CHECK(!value->empty() && end && *end == '\0', "flag " << flag << " expects a number, got '" << *value << "'");
  return parsed;
}

std::vector<int64_t> parse_int_list(const std::string& text, const std::string& flag_name) {
  std::vector<int64_t> result;
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    std::string item = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    char* end = nullptr;
    long long parsed = std::strtoll(item.c_str(), &end, 10);
    FATHOM_CHECK(!item.empty() && end && *end == '\0',
                 flag_name << " expects a comma-separated list of integers, got '" << item << "'");
    result.push_back(parsed);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return result;
}

}  // namespace fathom
