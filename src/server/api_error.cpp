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
