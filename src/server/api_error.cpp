#include "server/api_error.h"

namespace fathom::server {

namespace {

// fathom::Error messages end in " [src/file.cpp:123]"; clients get the message without our source location.
std::string without_source_location(std::string message) {
  const size_t open = message.rfind(" [src/");
  if (open != std::string::npos && !message.empty() && message.back() == ']' && message.find(']', open) == message.size() - 1) {
    message.erase(open);
  }
  return message;
}

}  // namespace

ApiError::ApiError(int status, std::string message, std::string param, std::string code, std::string type)
    : status_(status), message_(without_source_location(std::move(message))), param_(std::move(param)), code_(std::move(code)),
      type_(type.empty() ? default_error_type(status) : std::move(type)) {}

std::string default_error_type(int status) {
  // OpenAI reports every client error (401 and 404 included) as "invalid_request_error".
  if (status == 429) return "rate_limit_error";
  if (status >= 500) return "server_error";
  return "invalid_request_error";
}

ApiError protocol_error(int status, const std::string& message) {
  const char* code = "bad_request";
  switch (status) {
    case 408: code = "request_timeout"; break;
    case 413: code = "request_too_large"; break;
    case 414: code = "request_line_too_long"; break;
    case 417: code = "expectation_failed"; break;
    case 431: code = "request_headers_too_large"; break;
    case 501: code = "not_implemented"; break;
    case 505: code = "http_version_not_supported"; break;
    default: break;
  }
  return ApiError(status, message, "", code, "invalid_request_error");
}

nlohmann::ordered_json error_json(const ApiError& error) {
  nlohmann::ordered_json body;
  body["message"] = error.message();
  body["type"] = error.type();
  body["param"] = error.param().empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(error.param());
  body["code"] = error.code().empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(error.code());
  return nlohmann::ordered_json{{"error", body}};
}

HttpResponse error_response(const ApiError& error) {
  // Invalid UTF-8 echoed from a request must not make the error itself unserializable.
  return HttpResponse::json(error.status(), error_json(error).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

}  // namespace fathom::server
