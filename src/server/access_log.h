#pragma once
// The access log's record of one HTTP exchange and its line (uvicorn's access log, which SGLang prints at its
// default log level), e.g. `127.0.0.1:53422 "POST /v1/chat/completions HTTP/1.1" 200 35.2 ms`.
#include <string>

namespace fathom::server {

struct ExchangeRecord {
  std::string peer;          // "127.0.0.1:53422"
  std::string method;        // "-" (or empty) when no valid request line arrived: the line shows "-" for it
  std::string target;
  int version_minor = 1;     // HTTP/1.x
  int status = 0;            // the status sent; 0: none (the client left before the response started)
  bool connection_closed = false;  // closed (client gone, or the server gave up on it) before the response finished
  double duration_ms = 0.0;  // the request in -> its response finished (or the client gone)
};

// One line, no newline. The request target is cut to 256 bytes, and bytes outside printable ASCII, '"' and '\'
// are written as \xHH, so a crafted request cannot forge log lines.
std::string format_access_line(const ExchangeRecord& record);

}  // namespace fathom::server
