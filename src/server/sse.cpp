#include "server/sse.h"

namespace fathom::server {

HttpHeaders sse_headers() {
  return {{"Content-Type", "text/event-stream; charset=utf-8"}, {"Cache-Control", "no-cache"}, {"X-Accel-Buffering", "no"}};
}

std::string dump_json(const nlohmann::ordered_json& value) {
  return value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

void append_sse_event(std::string& out, const nlohmann::ordered_json& payload) {
  out += "data: ";
  out += dump_json(payload);
  out += "\n\n";
}

void append_sse_done(std::string& out) { out += "data: [DONE]\n\n"; }

}  // namespace fathom::server
