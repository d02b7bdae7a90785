#include "core/log.h"

#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <ctime>

#include "core/error.h"

namespace fathom {

LogLevel parse_log_level(std::string_view name) {
  std::string lower(name);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (lower == "debug") return LogLevel::kDebug;
  if (lower == "info") return LogLevel::kInfo;
  if (lower == "warning") return LogLevel::kWarning;
  if (lower == "error") return LogLevel::kError;
  FATHOM_FAIL("--log-level must be debug, info, warning or error, got '" << name << "'");
}

const char* log_level_name(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug: return "DEBUG";
    case LogLevel::kInfo: return "INFO";
    case LogLevel::kWarning: return "WARNING";
    case LogLevel::kError: return "ERROR";
  }
  return "?";
}

void Logger::log(LogLevel level, std::string_view message) const {
  if (!enabled(level)) return;
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  char stamp[32];
  std::strftime(stamp, sizeof(stamp), "[%Y-%m-%d %H:%M:%S] ", &local);
  std::string line = stamp;
  line += log_level_name(level);
  line += ' ';
  for (const char c : message) {  // one line per message: a multi-line error text must not leave unstamped lines
    if (c == '\n') line += "\\n";
    else if (c == '\r') line += "\\r";
    else line += c;
  }
  line += '\n';
  // One write for the whole line (stdio may split a long line over several): lines of different threads stay whole.
  const int fd = fileno(sink_);
  if (fd < 0) return;
  std::fflush(sink_);
  size_t written = 0;
  while (written < line.size()) {
    const ssize_t n = ::write(fd, line.data() + written, line.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // a closed or full log stream must not stop the server
    written += static_cast<size_t>(n);
  }
}

}  // namespace fathom
