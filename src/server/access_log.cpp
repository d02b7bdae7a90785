#include "server/access_log.h"

#include <cstdio>

namespace fathom::server {

namespace {

constexpr size_t kMaxLoggedTargetBytes = 256;  // also the peer's bound
constexpr size_t kMaxLoggedMethodBytes = 32;

void append_escaped(std::string& line, const std::string& text, size_t max_bytes) {
  const size_t shown = text.size() < max_bytes ? text.size() : max_bytes;
  for (size_t i = 0; i < shown; ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c < 0x20 || c >= 0x7f || c == '"' || c == '\\') {
      char escaped[8];
      std::snprintf(escaped, sizeof(escaped), "\\x%02x", c);
      line += escaped;
    } else {
      line += static_cast<char>(c);
    }
  }
  if (shown < text.size()) line += "...";
}

}  // namespace

std::string format_access_line(const ExchangeRecord& record) {
  std::string line;
  append_escaped(line, record.peer, kMaxLoggedTargetBytes);
  if (record.method.empty() || record.method == "-") {
    line += " \"-\" ";  // no request line (nginx's form)
  } else {
    line += " \"";
    append_escaped(line, record.method, kMaxLoggedMethodBytes);
    line += ' ';
    append_escaped(line, record.target, kMaxLoggedTargetBytes);
    line += " HTTP/1." + std::to_string(record.version_minor) + "\" ";
  }
  line += record.status > 0 ? std::to_string(record.status) : "-";
  char timing[64];
  const char* format = record.connection_closed ? " connection closed unfinished after %.1f ms" : " %.1f ms";
  std::snprintf(timing, sizeof(timing), format, record.duration_ms);
  line += timing;
  return line;
}

}  // namespace fathom::server
