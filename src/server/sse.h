#pragma once
// Server-sent events framing for streamed responses: "data: <json>\n\n" events ending with "data: [DONE]".
#include <string>

#include <nlohmann/json.hpp>

#include "server/http_message.h"

namespace fathom::server {

// Content-Type text/event-stream, no caching, no proxy buffering.
HttpHeaders sse_headers();
void append_sse_event(std::string& out, const nlohmann::ordered_json& payload);
void append_sse_done(std::string& out);

// JSON text for responses: invalid UTF-8 (never expected from the engine) is replaced, not thrown on.
std::string dump_json(const nlohmann::ordered_json& value);

}  // namespace fathom::server
