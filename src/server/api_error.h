#pragma once
// Client-facing errors in the OpenAI shape {"error": {"message", "type", "param", "code"}} with their HTTP
// status. Request parsing throws ApiError; the handlers turn it into a response and keep serving.
#include <exception>
#include <string>

#include <nlohmann/json.hpp>

#include "server/http_message.h"

namespace fathom::server {

class ApiError : public std::exception {
 public:
  ApiError(int status, std::string message, std::string param = "", std::string code = "", std::string type = "");

  int status() const { return status_; }
  const std::string& message() const { return message_; }
  const std::string& param() const { return param_; }
  const std::string& code() const { return code_; }
  const std::string& type() const { return type_; }
  const char* what() const noexcept override { return message_.c_str(); }

  static ApiError invalid_value(const std::string& param, const std::string& message) {
    return ApiError(400, message, param, "invalid_value");
  }
  static ApiError missing(const std::string& param) {
    return ApiError(400, "Missing required parameter: '" + param + "'.", param, "missing_required_parameter");
  }

 private:
  int status_;
  std::string message_, param_, code_, type_;
};

// "invalid_request_error" for 4xx, "server_error" for 5xx, ... when the error names no type.
std::string default_error_type(int status);

// An HTTP-level error the connection answers before any handler (malformed request, limits, timeouts): every
// one is the client's, so "invalid_request_error", with a code naming the status ("request_too_large", ...).
ApiError protocol_error(int status, const std::string& message);

nlohmann::ordered_json error_json(const ApiError& error);
HttpResponse error_response(const ApiError& error);

}  // namespace fathom::server
