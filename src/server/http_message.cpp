#include "server/http_message.h"

#include <cctype>
#include <cstdio>
#include <ctime>

namespace fathom::server {

bool equals_ignore_case(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i]))) return false;
  }
  return true;
}

namespace {

// True when the comma-separated header value lists `token` (case-insensitive).
bool header_lists_token(std::string_view value, std::string_view token) {
  size_t start = 0;
  while (start <= value.size()) {
    size_t comma = value.find(',', start);
    std::string_view item = value.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start);
    while (!item.empty() && (item.front() == ' ' || item.front() == '\t')) item.remove_prefix(1);
    while (!item.empty() && (item.back() == ' ' || item.back() == '\t')) item.remove_suffix(1);
    if (equals_ignore_case(item, token)) return true;
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return false;
}

void append_headers(std::string& out, const HttpHeaders& headers) {
  for (const auto& [name, value] : headers) {
    out += name;
    out += ": ";
    out += value;
    out += "\r\n";
  }
}

void append_status_line(std::string& out, int status, int version_minor) {
  out += version_minor == 0 ? "HTTP/1.0 " : "HTTP/1.1 ";
  out += std::to_string(status);
  out += ' ';
  out += http_status_text(status);
  out += "\r\nDate: ";
  out += http_date_now();
  out += "\r\nServer: fathom\r\n";
}

}  // namespace

std::optional<std::string_view> HttpRequest::header(std::string_view lower_name) const {
  for (const auto& [name, value] : headers) {
    if (name == lower_name) return std::string_view(value);
  }
  return std::nullopt;
}

bool HttpRequest::wants_keep_alive() const {
  auto connection = header("connection");
  if (version_minor == 0) return connection && header_lists_token(*connection, "keep-alive");
  return !(connection && header_lists_token(*connection, "close"));
}

HttpResponse HttpResponse::json(int status, std::string body) {
  HttpResponse response;
  response.status = status;
  response.headers.emplace_back("Content-Type", "application/json");
  response.body = std::move(body);
  return response;
}

HttpResponse HttpResponse::text(int status, std::string body) {
  HttpResponse response;
  response.status = status;
  response.headers.emplace_back("Content-Type", "text/plain; charset=utf-8");
  response.body = std::move(body);
  return response;
}

std::string_view http_status_text(int status) {
  switch (status) {
    case 100: return "Continue";
    case 200: return "OK";
    case 204: return "No Content";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 411: return "Length Required";
    case 413: return "Content Too Large";
    case 414: return "URI Too Long";
    case 415: return "Unsupported Media Type";
    case 417: return "Expectation Failed";
    case 422: return "Unprocessable Content";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    case 505: return "HTTP Version Not Supported";
    default: return "Unknown";
  }
}

std::string http_date_now() {
  std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  char buffer[64];
  size_t length = std::strftime(buffer, sizeof(buffer), "%a, %d %b %Y %H:%M:%S GMT", &utc);
  return std::string(buffer, length);
}

std::string serialize_response(const HttpResponse& response, int version_minor, bool keep_alive, bool head_only) {
  std::string out;
  out.reserve(160 + response.body.size());
  append_status_line(out, response.status, version_minor);
  append_headers(out, response.headers);
  out += "Content-Length: ";
  out += std::to_string(response.body.size());
  out += keep_alive ? "\r\nConnection: keep-alive\r\n\r\n" : "\r\nConnection: close\r\n\r\n";
  if (!head_only) out += response.body;
  return out;
}

std::string serialize_stream_head(int status, const HttpHeaders& headers, int version_minor, bool keep_alive) {
  std::string out;
  append_status_line(out, status, version_minor);
  append_headers(out, headers);
  if (version_minor == 0) {
    out += "Connection: close\r\n\r\n";
  } else {
    out += "Transfer-Encoding: chunked\r\n";
    out += keep_alive ? "Connection: keep-alive\r\n\r\n" : "Connection: close\r\n\r\n";
  }
  return out;
}

void append_chunk(std::string& out, std::string_view data) {
  if (data.empty()) return;
  char size_line[24];
  int length = std::snprintf(size_line, sizeof(size_line), "%zx\r\n", data.size());
  out.append(size_line, static_cast<size_t>(length));
  out.append(data);
  out += "\r\n";
}

}  // namespace fathom::server
