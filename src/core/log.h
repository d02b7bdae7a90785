#pragma once
// Operator-facing log lines ("[2026-12-07 11:33:20] INFO message") on a stream, filtered by a threshold level
// (serve's --log-level). A Logger is immutable once built and safe to share between threads: each line leaves in
// one write (newlines inside a message become \n), so lines up to PIPE_BUF bytes from different threads stay whole.
#include <cstdio>
#include <string>
#include <string_view>

namespace fathom {

enum class LogLevel { kDebug, kInfo, kWarning, kError };

// "debug" | "info" | "warning" | "error" (any case); throws fathom::Error naming the valid values otherwise.
LogLevel parse_log_level(std::string_view name);
const char* log_level_name(LogLevel level);  // "DEBUG", "INFO", "WARNING", "ERROR"

class Logger {
 public:
  explicit Logger(LogLevel threshold, std::FILE* sink = stderr) : threshold_(threshold), sink_(sink) {}

  LogLevel threshold() const { return threshold_; }
  bool enabled(LogLevel level) const { return level >= threshold_; }
  // Writes the line (local time, level, message, newline) when `level` passes the threshold.
  void log(LogLevel level, std::string_view message) const;
  void debug(std::string_view message) const { log(LogLevel::kDebug, message); }
  void info(std::string_view message) const { log(LogLevel::kInfo, message); }
  void warning(std::string_view message) const { log(LogLevel::kWarning, message); }
  void error(std::string_view message) const { log(LogLevel::kError, message); }

 private:
  LogLevel threshold_;
  std::FILE* sink_;
};

}  // namespace fathom
