#include "server/http_request_parser.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <optional>
#include <string>

namespace fathom::server {

namespace {

// RFC 3986 percent-decoding of a path ("/v1/models/a%2Fb" -> "/v1/models/a/b", as clients encode ids);
// nullopt for a malformed escape or one that decodes to a control character.
std::optional<std::string> percent_decode_path(std::string_view path) {
  auto hex_value = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::string decoded;
  decoded.reserve(path.size());
  for (size_t i = 0; i < path.size(); ++i) {
    if (path[i] != '%') {
      decoded += path[i];
      continue;
    }
    if (i + 2 >= path.size()) return std::nullopt;
    const int high = hex_value(path[i + 1]), low = hex_value(path[i + 2]);
    if (high < 0 || low < 0) return std::nullopt;
    const int byte = high * 16 + low;
    if (byte < 0x20 || byte == 0x7f) return std::nullopt;
    decoded += static_cast<char>(byte);
    i += 2;
  }
  return decoded;
}

constexpr size_t kMaxChunkLineBytes = 4096;

bool is_token_char(unsigned char c) {
  if (std::isalnum(c)) return true;
  switch (c) {
    case '!': case '#': case '$': case '%': case '&': case '\'': case '*': case '+': case '-': case '.':
    case '^': case '_': case '`': case '|': case '~':
      return true;
    default:
      return false;
  }
}

bool is_token(std::string_view text) {
  return !text.empty() && std::all_of(text.begin(), text.end(), [](char c) { return is_token_char(static_cast<unsigned char>(c)); });
}

std::string_view trim_ows(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) text.remove_suffix(1);
  return text;
}

std::string to_lower(std::string_view text) {
  std::string lower(text);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return lower;
}

// Finds the blank line ending the head in `text`, searching from `from`; returns the index after it and the
// head's length (both CRLF CRLF and bare LF LF are accepted).
bool find_head_end(std::string_view text, size_t from, size_t& head_length, size_t& head_end) {
  for (size_t i = from; i < text.size(); ++i) {
    if (text[i] != '\n') continue;
    // i is a line end; the line before it is empty if text[..i] ends with "\n" or "\n\r".
    if (i >= 1 && text[i - 1] == '\n') {
      head_length = i - 1;
      head_end = i + 1;
      return true;
    }
    if (i >= 2 && text[i - 1] == '\r' && text[i - 2] == '\n') {
      head_length = i - 2;
      head_end = i + 1;
      return true;
    }
  }
  return false;
}

}  // namespace

void HttpRequestParser::fail(int status, std::string message) {
  state_ = State::kFailed;
  status_ = Status::kError;
  error_status_ = status;
  error_message_ = std::move(message);
}

HttpRequest HttpRequestParser::take_request() {
  HttpRequest done = std::move(request_);
  request_ = HttpRequest{};
  state_ = State::kStart;
  status_ = Status::kNeedMore;
  head_.clear();
  line_.clear();
  trailer_bytes_ = 0;
  body_remaining_ = 0;
  expect_continue_ = false;
  chunked_ = false;
  return done;
}

bool HttpRequestParser::take_line(std::string_view data, size_t& position, std::string& line_out, size_t max_line_bytes) {
  size_t newline = data.find('\n', position);
  size_t end = newline == std::string_view::npos ? data.size() : newline;
  line_out.append(data.substr(position, end - position));
  position = newline == std::string_view::npos ? data.size() : newline + 1;
  if (line_out.size() > max_line_bytes) {
    fail(400, "chunked body: line longer than " + std::to_string(max_line_bytes) + " bytes");
    return false;
  }
  if (newline == std::string_view::npos) return false;
  if (!line_out.empty() && line_out.back() == '\r') line_out.pop_back();
  return true;
}

size_t HttpRequestParser::feed(std::string_view data) {
  size_t position = 0;
  while (status_ == Status::kNeedMore && position < data.size()) {
    switch (state_) {
      case State::kStart:
        // Tolerate empty lines before a request line (RFC 9112 section 2.2).
        while (position < data.size() && (data[position] == '\r' || data[position] == '\n')) ++position;
        if (position < data.size()) state_ = State::kHeaders;
        break;
      case State::kHeaders: {
        const size_t old_size = head_.size();
        const size_t room = limits_.max_header_bytes + 4 - std::min(old_size, limits_.max_header_bytes + 4);
        const size_t take = std::min(room, data.size() - position);
        head_.append(data.substr(position, take));
        size_t head_length = 0, head_end = 0;
        if (!find_head_end(head_, old_size >= 3 ? old_size - 3 : 0, head_length, head_end)) {
          position += take;
          if (head_.size() > limits_.max_header_bytes) {
            // Without a line end yet, the request line (its target) is what is too long: 414, else 431.
            if (head_.find('\n') == std::string::npos) {
              fail(414, "request line exceeds " + std::to_string(limits_.max_header_bytes) + " bytes");
            } else {
              fail(431, "request line and headers exceed " + std::to_string(limits_.max_header_bytes) + " bytes");
            }
          }
          break;
        }
        if (head_length > limits_.max_header_bytes) {
          fail(431, "request line and headers exceed " + std::to_string(limits_.max_header_bytes) + " bytes");
          break;
        }
        position += head_end - old_size;  // bytes past the blank line go back to the caller's buffer
        std::string head = std::move(head_);
        head_.clear();
        if (!parse_head(std::string_view(head).substr(0, head_length)) || !finish_headers()) break;
        break;
      }
      case State::kBodyLength: {
        const size_t take = std::min(body_remaining_, data.size() - position);
        request_.body.append(data.substr(position, take));
        position += take;
        body_remaining_ -= take;
        expect_continue_ = false;
        if (body_remaining_ == 0) {
          state_ = State::kDone;
          status_ = Status::kComplete;
        }
        break;
      }
      case State::kChunkSize: {
        expect_continue_ = false;
        if (!take_line(data, position, line_, kMaxChunkLineBytes)) break;
        std::string_view size_text = line_;
        if (size_t semicolon = size_text.find(';'); semicolon != std::string_view::npos) size_text = size_text.substr(0, semicolon);
        size_text = trim_ows(size_text);
        uint64_t chunk_size = 0;
        auto [end, error] = std::from_chars(size_text.data(), size_text.data() + size_text.size(), chunk_size, 16);
        if (size_text.empty() || error != std::errc() || end != size_text.data() + size_text.size()) {
          fail(400, "chunked body: invalid chunk size line '" + line_.substr(0, 64) + "'");
          break;
        }
        line_.clear();
        if (chunk_size > limits_.max_body_bytes || request_.body.size() + chunk_size > limits_.max_body_bytes) {
          fail(413, "request body exceeds " + std::to_string(limits_.max_body_bytes) + " bytes");
          break;
        }
        body_remaining_ = static_cast<size_t>(chunk_size);
        state_ = chunk_size == 0 ? State::kTrailers : State::kChunkData;
        break;
      }
      case State::kChunkData: {
        const size_t take = std::min(body_remaining_, data.size() - position);
        request_.body.append(data.substr(position, take));
        position += take;
        body_remaining_ -= take;
        if (body_remaining_ == 0) state_ = State::kChunkDataEnd;
        break;
      }
      case State::kChunkDataEnd: {
        const char c = data[position++];
        if (c == '\n') {
          line_.clear();
          state_ = State::kChunkSize;
        } else if (c == '\r' && line_.empty()) {
          line_ = "\r";
        } else {
          fail(400, "chunked body: chunk data not followed by CRLF");
        }
        break;
      }
      case State::kTrailers: {
        const size_t before = position;
        bool got_line = take_line(data, position, line_, limits_.max_header_bytes);
        trailer_bytes_ += position - before;
        if (trailer_bytes_ > limits_.max_header_bytes) {
          fail(431, "chunked body trailers exceed " + std::to_string(limits_.max_header_bytes) + " bytes");
          break;
        }
        if (!got_line) break;
        const bool blank = line_.empty();
        line_.clear();  // trailer fields are accepted and ignored
        if (blank) {
          state_ = State::kDone;
          status_ = Status::kComplete;
        }
        break;
      }
      case State::kDone:
      case State::kFailed:
        return position;
    }
  }
  // A request without a body completes as soon as its headers do, even when no further byte arrives.
  return position;
}

bool HttpRequestParser::parse_head(std::string_view head) {
  size_t line_start = 0;
  bool first = true;
  while (line_start <= head.size()) {
    size_t newline = head.find('\n', line_start);
    std::string_view line = head.substr(line_start, newline == std::string_view::npos ? std::string_view::npos : newline - line_start);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (first) {
      if (!parse_request_line(line)) return false;
      first = false;
    } else if (!parse_header_line(line)) {
      return false;
    }
    if (newline == std::string_view::npos) break;
    line_start = newline + 1;
  }
  return true;
}

bool HttpRequestParser::parse_request_line(std::string_view line) {
  size_t first_space = line.find(' ');
  size_t second_space = first_space == std::string_view::npos ? first_space : line.find(' ', first_space + 1);
  if (second_space == std::string_view::npos || line.find(' ', second_space + 1) != std::string_view::npos) {
    fail(400, "malformed request line");
    return false;
  }
  std::string_view method = line.substr(0, first_space);
  std::string_view target = line.substr(first_space + 1, second_space - first_space - 1);
  std::string_view version = line.substr(second_space + 1);
  if (!is_token(method)) {
    fail(400, "malformed request method");
    return false;
  }
  if (target.empty() || std::any_of(target.begin(), target.end(), [](char c) { return static_cast<unsigned char>(c) <= 0x20 || c == 0x7f; })) {
    fail(400, "malformed request target");
    return false;
  }
  if (version.size() != 8 || version.substr(0, 5) != "HTTP/" || !std::isdigit(static_cast<unsigned char>(version[5])) ||
      version[6] != '.' || !std::isdigit(static_cast<unsigned char>(version[7]))) {
    fail(400, "malformed HTTP version");
    return false;
  }
  if (version[5] != '1') {
    fail(505, "only HTTP/1.0 and HTTP/1.1 are supported");
    return false;
  }
  request_.method = std::string(method);
  request_.target = std::string(target);
  request_.version_minor = version[7] == '0' ? 0 : 1;

  std::string_view path = target;
  if (path.substr(0, 7) == "http://" || path.substr(0, 8) == "https://") {  // absolute-form
    size_t slash = path.find('/', path.find("//") + 2);
    path = slash == std::string_view::npos ? std::string_view("/") : path.substr(slash);
  }
  if (size_t question = path.find('?'); question != std::string_view::npos) {
    request_.query = std::string(path.substr(question + 1));
    path = path.substr(0, question);
  }
  if (size_t hash = path.find('#'); hash != std::string_view::npos) path = path.substr(0, hash);
  if (path.empty() || (path.front() != '/' && path != "*")) {
    fail(400, "request target must be an absolute path");
    return false;
  }
  std::optional<std::string> decoded = percent_decode_path(path);
  if (!decoded) {
    fail(400, "malformed percent-encoding in the request target");
    return false;
  }
  request_.path = std::move(*decoded);
  return true;
}

bool HttpRequestParser::parse_header_line(std::string_view line) {
  if (!line.empty() && (line.front() == ' ' || line.front() == '\t')) {
    fail(400, "obsolete header line folding is not allowed");
    return false;
  }
  size_t colon = line.find(':');
  if (colon == std::string_view::npos || !is_token(line.substr(0, colon))) {
    fail(400, "malformed header line");
    return false;
  }
  std::string_view value = trim_ows(line.substr(colon + 1));
  if (std::any_of(value.begin(), value.end(), [](char c) { return (static_cast<unsigned char>(c) < 0x20 && c != '\t') || c == 0x7f; })) {
    fail(400, "header value contains control characters");
    return false;
  }
  if (request_.headers.size() >= limits_.max_header_count) {
    fail(431, "more than " + std::to_string(limits_.max_header_count) + " headers");
    return false;
  }
  request_.headers.emplace_back(to_lower(line.substr(0, colon)), std::string(value));
  return true;
}

bool HttpRequestParser::finish_headers() {
  std::optional<uint64_t> content_length;
  bool has_transfer_encoding = false;
  for (const auto& [name, value] : request_.headers) {
    if (name == "content-length") {
      uint64_t parsed = 0;
      auto [end, error] = std::from_chars(value.data(), value.data() + value.size(), parsed);
      if (value.empty() || error == std::errc::result_out_of_range) {
        fail(value.empty() ? 400 : 413, value.empty() ? "empty Content-Length" : "request body too large");
        return false;
      }
      if (error != std::errc() || end != value.data() + value.size()) {
        fail(400, "invalid Content-Length '" + value.substr(0, 32) + "'");
        return false;
      }
      if (content_length && *content_length != parsed) {
        fail(400, "conflicting Content-Length headers");
        return false;
      }
      content_length = parsed;
    } else if (name == "transfer-encoding") {
      has_transfer_encoding = true;
      std::string_view last = value;
      if (size_t comma = last.rfind(','); comma != std::string_view::npos) last = last.substr(comma + 1);
      last = trim_ows(last);
      if (!equals_ignore_case(last, "chunked") || value.find(',') != std::string::npos) {
        fail(501, "unsupported Transfer-Encoding '" + value.substr(0, 32) + "' (only chunked)");
        return false;
      }
      chunked_ = true;
    } else if (name == "expect") {
      if (!equals_ignore_case(value, "100-continue")) {
        fail(417, "unsupported Expect header '" + value.substr(0, 32) + "'");
        return false;
      }
      expect_continue_ = true;
    }
  }
  if (has_transfer_encoding && content_length) {
    fail(400, "both Content-Length and Transfer-Encoding given");
    return false;
  }
  if (chunked_) {
    state_ = State::kChunkSize;
    return true;
  }
  const uint64_t length = content_length.value_or(0);
  if (length > limits_.max_body_bytes) {
    fail(413, "request body of " + std::to_string(length) + " bytes exceeds the limit of " +
                  std::to_string(limits_.max_body_bytes) + " bytes");
    return false;
  }
  body_remaining_ = static_cast<size_t>(length);
  if (length == 0) {
    expect_continue_ = false;
    state_ = State::kDone;
    status_ = Status::kComplete;
  } else {
    request_.body.reserve(static_cast<size_t>(length));
    state_ = State::kBodyLength;
  }
  return true;
}

}  // namespace fathom::server
