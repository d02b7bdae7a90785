#include "core/cli_args.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "core/error.h"

namespace fathom {

namespace {

// nullopt unless `text` is one integer; out of int64's range throws, as strtoll would saturate it silently.
std::optional<int64_t> parse_int64(const std::string& text, const std::string& flag) {
  if (text.empty()) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const long long parsed = std::strtoll(text.c_str(), &end, 10);
  if (!end || *end != '\0') return std::nullopt;
  FATHOM_CHECK(errno != ERANGE, flag << ": " << text << " is outside the 64-bit integer range");
  return static_cast<int64_t>(parsed);
}

// "flags taking a value: --a, --b; switches: --c" (sorted, as the sets are).
std::string describe_flags(const std::set<std::string>& value_flags, const std::set<std::string>& bool_flags) {
  auto join = [](const std::set<std::string>& flags) {
    std::string joined;
    for (const std::string& flag : flags) joined += (joined.empty() ? "" : ", ") + flag;
    return joined;
  };
  std::string text;
  if (!value_flags.empty()) text += "flags taking a value: " + join(value_flags);
  if (!bool_flags.empty()) text += std::string(text.empty() ? "" : "; ") + "switches: " + join(bool_flags);
  return text.empty() ? "no flags" : text;
}

// "flags taking a value:" then "  --name  description" lines, then "switches:" and theirs.
std::string describe_flags_in_lines(const std::set<std::string>& value_flags, const std::set<std::string>& bool_flags,
                                    const FlagDescriptions& descriptions) {
  size_t width = 0;
  for (const auto* flags : {&value_flags, &bool_flags}) {
    for (const std::string& flag : *flags) width = std::max(width, flag.size());
  }
  std::string text;
  auto section = [&](const char* title, const std::set<std::string>& flags) {
    if (flags.empty()) return;
    text += std::string(text.empty() ? "" : "\n") + title + "\n";
    for (const std::string& flag : flags) {
      const auto description = descriptions.find(flag);
      text += "  " + flag;
      if (description != descriptions.end()) text += std::string(width + 2 - flag.size(), ' ') + description->second;
      text += "\n";
    }
  };
  section("flags taking a value:", value_flags);
  section("switches:", bool_flags);
  return text;
}

}  // namespace

CliArgs::CliArgs(const std::vector<std::string>& args, const std::set<std::string>& value_flags,
                 const std::set<std::string>& bool_flags, const FlagDescriptions& descriptions) {
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--help" || arg == "-h") {
      throw HelpRequested(descriptions.empty() ? describe_flags(value_flags, bool_flags)
                                               : describe_flags_in_lines(value_flags, bool_flags, descriptions));
    }
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
        // `--api-key $UNSET --enable-metrics` must not take the next flag as the key; a value that merely starts
        // with -- ("--- title") is still a value.
        const std::string next_name = args[i + 1].substr(0, args[i + 1].find('='));
        FATHOM_CHECK(!value_flags.count(next_name) && !bool_flags.count(next_name),
                     "flag " << name << " needs a value, got the flag " << args[i + 1] << " (write " << name
                             << "=VALUE for a value that is a flag's name)");
        values_[name] = args[++i];
      }
    } else if (bool_flags.count(name)) {
      FATHOM_CHECK(!inline_value, "flag " << name << " takes no value");
      present_bools_.insert(name);
    } else {
      FATHOM_FAIL("unknown flag " << name << " (" << describe_flags(value_flags, bool_flags) << ")");
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
  const std::optional<int64_t> parsed = parse_int64(*value, "flag " + flag);
  FATHOM_CHECK(parsed.has_value(), "flag " << flag << " expects an integer, got '" << *value << "'");
  return *parsed;
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
    const std::optional<int64_t> parsed = parse_int64(item, flag_name);
    FATHOM_CHECK(parsed.has_value(), flag_name << " expects a comma-separated list of integers, got '" << item << "'");
    result.push_back(*parsed);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return result;
}

std::ofstream open_output_file(const std::string& path, const std::string& flag, bool append) {
  errno = 0;
  std::ofstream out(path, append ? std::ios::app : std::ios::trunc);
  FATHOM_CHECK(out.is_open(), flag << ": cannot open " << path << " for writing"
                                   << (errno ? std::string(": ") + std::strerror(errno) : std::string()));
  return out;
}

void finish_output_file(std::ofstream& out, const std::string& path, const std::string& flag) {
  errno = 0;
  out.flush();
  FATHOM_CHECK(out.good(), flag << ": failed writing " << path
                                << (errno ? std::string(": ") + std::strerror(errno) : std::string()));
}

void flush_stdout() {
  errno = 0;
  const bool flushed = std::fflush(stdout) == 0;
  FATHOM_CHECK(flushed && !std::ferror(stdout),
               "failed writing to stdout" << (errno ? std::string(": ") + std::strerror(errno) : std::string()));
}

std::vector<std::string> rename_flags(const std::vector<std::string>& args,
                                      const std::map<std::string, std::string>& aliases) {
  std::vector<std::string> renamed;
  for (const std::string& arg : args) {
    const std::string name = arg.substr(0, arg.find('='));
    const auto alias = aliases.find(name);
    if (arg.rfind("--", 0) == 0 && alias != aliases.end()) renamed.push_back(alias->second + arg.substr(name.size()));
    else renamed.push_back(arg);
  }
  return renamed;
}

}  // namespace fathom
