// HttpRequestParser: byte-at-a-time input, pipelining, chunked bodies, limits and malformed requests.
#include <gtest/gtest.h>

#include "server/http_request_parser.h"
#include "server/router.h"

namespace fathom::server {
namespace {

using Status = HttpRequestParser::Status;

HttpLimits small_limits() {
  HttpLimits limits;
  limits.max_header_bytes = 256;
  limits.max_body_bytes = 64;
  limits.max_header_count = 8;
  return limits;
}

// Feeds everything at once; returns the parser for inspection.
HttpRequestParser parse_all(const std::string& bytes, size_t* consumed = nullptr, HttpLimits limits = HttpLimits{}) {
  HttpRequestParser parser(limits);
  size_t used = parser.feed(bytes);
  if (consumed) *consumed = used;
  return parser;
}

TEST(HttpParser, SimpleGet) {
  HttpRequestParser parser = parse_all("GET /v1/models?x=1 HTTP/1.1\r\nHost: a\r\nX-Thing:  value \r\n\r\n");
  ASSERT_EQ(parser.status(), Status::kComplete);
  HttpRequest request = parser.take_request();
  EXPECT_EQ(request.method, "GET");
  EXPECT_EQ(request.path, "/v1/models");
  EXPECT_EQ(request.query, "x=1");
  EXPECT_EQ(request.version_minor, 1);
  EXPECT_EQ(request.header("x-thing").value(), "value");
  EXPECT_TRUE(request.wants_keep_alive());
  EXPECT_TRUE(request.body.empty());
}

// Paths are percent-decoded (clients encode the '/' of a model id); the raw target and the query stay as sent.
TEST(HttpParser, PathIsPercentDecoded) {
  HttpRequestParser parser = parse_all("GET /v1/%6dodels/models%2Ffathom-nano%20x?q=%2F HTTP/1.1\r\n\r\n");
  ASSERT_EQ(parser.status(), Status::kComplete);
  HttpRequest request = parser.take_request();
  EXPECT_EQ(request.path, "/v1/models/models/fathom-nano x");
  EXPECT_EQ(request.query, "q=%2F");
  EXPECT_EQ(request.target, "/v1/%6dodels/models%2Ffathom-nano%20x?q=%2F");
}

TEST(HttpParser, ByteAtATimeWithBody) {
  const std::string bytes = "POST /generate HTTP/1.1\r\nContent-Length: 11\r\n\r\nhello world";
  HttpRequestParser parser(HttpLimits{});
  for (size_t i = 0; i < bytes.size(); ++i) {
    ASSERT_EQ(parser.status(), Status::kNeedMore) << "at byte " << i;
    EXPECT_EQ(parser.feed(std::string_view(bytes).substr(i, 1)), 1u);
  }
  ASSERT_EQ(parser.status(), Status::kComplete);
  EXPECT_EQ(parser.take_request().body, "hello world");
}

TEST(HttpParser, PipelinedRequestsAreConsumedOneAtATime) {
  const std::string first = "POST /a HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc";
  const std::string second = "GET /b HTTP/1.1\r\n\r\n";
  const std::string bytes = first + second;
  HttpRequestParser parser(HttpLimits{});
  size_t used = parser.feed(bytes);
  EXPECT_EQ(used, first.size());
  ASSERT_EQ(parser.status(), Status::kComplete);
  EXPECT_EQ(parser.take_request().path, "/a");
  EXPECT_EQ(parser.feed(std::string_view(bytes).substr(used)), second.size());
  ASSERT_EQ(parser.status(), Status::kComplete);
  EXPECT_EQ(parser.take_request().path, "/b");
}

TEST(HttpParser, HeadersSplitAcrossTheTerminator) {
  HttpRequestParser parser(HttpLimits{});
  parser.feed("GET / HTTP/1.1\r\nA: b\r");
  EXPECT_EQ(parser.status(), Status::kNeedMore);
  parser.feed("\n\r");
  EXPECT_EQ(parser.status(), Status::kNeedMore);
  parser.feed("\n");
  EXPECT_EQ(parser.status(), Status::kComplete);
}

TEST(HttpParser, BareLineFeedsAndLeadingEmptyLines) {
  HttpRequestParser parser = parse_all("\r\n\r\nGET /x HTTP/1.0\nConnection: keep-alive\n\n");
  ASSERT_EQ(parser.status(), Status::kComplete);
  HttpRequest request = parser.take_request();
  EXPECT_EQ(request.version_minor, 0);
  EXPECT_TRUE(request.wants_keep_alive());
}

TEST(HttpParser, ConnectionCloseAndHttp10Default) {
  EXPECT_FALSE(parse_all("GET / HTTP/1.1\r\nConnection: Close\r\n\r\n").request().wants_keep_alive());
  EXPECT_FALSE(parse_all("GET / HTTP/1.0\r\n\r\n").request().wants_keep_alive());
}

TEST(HttpParser, ChunkedBodyWithExtensionsAndTrailers) {
  const std::string bytes =
      "POST /v1/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
      "5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nX-Trailer: yes\r\n\r\nNEXT";
  size_t used = 0;
  HttpRequestParser parser = parse_all(bytes, &used);
  ASSERT_EQ(parser.status(), Status::kComplete) << parser.error_message();
  EXPECT_EQ(used, bytes.size() - 4);
  EXPECT_EQ(parser.take_request().body, "hello world");
}

TEST(HttpParser, ChunkedBodyByteAtATime) {
  const std::string bytes = "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\nA\r\n0123456789\r\n0\r\n\r\n";
  HttpRequestParser parser(HttpLimits{});
  for (char c : bytes) parser.feed(std::string_view(&c, 1));
  ASSERT_EQ(parser.status(), Status::kComplete) << parser.error_message();
  EXPECT_EQ(parser.take_request().body, "abc0123456789");
}

TEST(HttpParser, ExpectContinueIsReportedUntilTheBodyStarts) {
  HttpRequestParser parser(HttpLimits{});
  parser.feed("POST / HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n");
  EXPECT_TRUE(parser.headers_done());
  EXPECT_TRUE(parser.expects_continue());
  parser.feed("a");
  EXPECT_FALSE(parser.expects_continue());
  parser.feed("b");
  EXPECT_EQ(parser.status(), Status::kComplete);
}

struct BadRequestCase {
  const char* name;
  std::string bytes;
  int status;
};

class HttpParserErrors : public ::testing::TestWithParam<BadRequestCase> {};

TEST_P(HttpParserErrors, RejectsWithStatus) {
  HttpRequestParser parser = parse_all(GetParam().bytes, nullptr, small_limits());
  ASSERT_EQ(parser.status(), Status::kError) << GetParam().name;
  EXPECT_EQ(parser.error_status(), GetParam().status) << parser.error_message();
  EXPECT_FALSE(parser.error_message().empty());
}

INSTANTIATE_TEST_SUITE_P(
    Cases, HttpParserErrors,
    ::testing::Values(
        BadRequestCase{"garbage", "HELLO\r\n\r\n", 400},
        BadRequestCase{"missing version", "GET /\r\n\r\n", 400},
        BadRequestCase{"bad version", "GET / HTTX/1.1\r\n\r\n", 400},
        BadRequestCase{"http2", "GET / HTTP/2.0\r\n\r\n", 505},
        BadRequestCase{"relative target", "GET abc HTTP/1.1\r\n\r\n", 400},
        BadRequestCase{"truncated percent escape", "GET /v1/models/a%2 HTTP/1.1\r\n\r\n", 400},
        BadRequestCase{"non-hex percent escape", "GET /v1/%zzmodels HTTP/1.1\r\n\r\n", 400},
        BadRequestCase{"percent-encoded control byte", "GET /v1/models/a%00 HTTP/1.1\r\n\r\n", 400},
        BadRequestCase{"header without colon", "GET / HTTP/1.1\r\nBroken\r\n\r\n", 400},
        BadRequestCase{"space before colon", "GET / HTTP/1.1\r\nName : v\r\n\r\n", 400},
        BadRequestCase{"obs-fold", "GET / HTTP/1.1\r\nA: b\r\n c\r\n\r\n", 400},
        BadRequestCase{"bad content-length", "POST / HTTP/1.1\r\nContent-Length: 1x\r\n\r\n", 400},
        BadRequestCase{"negative content-length", "POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n", 400},
        BadRequestCase{"conflicting content-length", "POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", 400},
        BadRequestCase{"content-length and chunked", "POST / HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n", 400},
        BadRequestCase{"gzip transfer coding", "POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n", 501},
        BadRequestCase{"body too large", "POST / HTTP/1.1\r\nContent-Length: 65\r\n\r\n", 413},
        BadRequestCase{"huge content-length", "POST / HTTP/1.1\r\nContent-Length: 99999999999999999999999\r\n\r\n", 413},
        BadRequestCase{"chunked body too large", "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n41\r\n", 413},
        BadRequestCase{"bad chunk size", "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 400},
        BadRequestCase{"chunk without crlf", "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nabc", 400},
        BadRequestCase{"headers too large", "GET / HTTP/1.1\r\nX: " + std::string(300, 'a') + "\r\n\r\n", 431},
        BadRequestCase{"headers too large, unterminated", "GET / HTTP/1.1\r\nX: " + std::string(300, 'a'), 431},
        BadRequestCase{"request line too long", "GET /" + std::string(300, 'a'), 414},
        BadRequestCase{"too many headers", "GET / HTTP/1.1\r\nA: 1\r\nA: 1\r\nA: 1\r\nA: 1\r\nA: 1\r\nA: 1\r\nA: 1\r\nA: 1\r\nA: 1\r\n\r\n", 431},
        BadRequestCase{"unsupported expectation", "POST / HTTP/1.1\r\nExpect: magic\r\n\r\n", 417},
        BadRequestCase{"control character in value", std::string("GET / HTTP/1.1\r\nA: b\x01\r\n\r\n"), 400}),
    [](const ::testing::TestParamInfo<BadRequestCase>& info) {
      std::string name = info.param.name;
      for (char& c : name) {
        if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
      }
      return name;
    });

TEST(HttpParser, ResponseSerialization) {
  HttpResponse response = HttpResponse::json(404, "{}");
  std::string wire = serialize_response(response, 1, true, false);
  EXPECT_EQ(wire.rfind("HTTP/1.1 404 Not Found\r\n", 0), 0u);
  EXPECT_NE(wire.find("Content-Length: 2\r\n"), std::string::npos);
  EXPECT_NE(wire.find("Connection: keep-alive\r\n\r\n{}"), std::string::npos);
  std::string head_only = serialize_response(response, 1, false, true);
  EXPECT_NE(head_only.find("Connection: close\r\n\r\n"), std::string::npos);
  EXPECT_EQ(head_only.substr(head_only.size() - 4), "\r\n\r\n");

  std::string chunk;
  append_chunk(chunk, "hello");
  EXPECT_EQ(chunk, "5\r\nhello\r\n");
  append_chunk(chunk, "");
  EXPECT_EQ(chunk, "5\r\nhello\r\n");
  EXPECT_NE(serialize_stream_head(200, {}, 1, true).find("Transfer-Encoding: chunked"), std::string::npos);
  EXPECT_EQ(serialize_stream_head(200, {}, 0, true).find("Transfer-Encoding"), std::string::npos);
}

TEST(Router, ExactPrefixMethodAndTrailingSlash) {
  Router router;
  int hits = 0;
  router.add("GET", "/v1/models", [&](const std::shared_ptr<HttpExchange>&) { ++hits; });
  router.add("GET", "/v1/models/*", [&](const std::shared_ptr<HttpExchange>&) { hits += 10; });
  router.add("POST", "/generate", [&](const std::shared_ptr<HttpExchange>&) {});
  router.add("GET", "/generate", [&](const std::shared_ptr<HttpExchange>&) {});

  EXPECT_EQ(router.find("GET", "/v1/models").outcome, Router::Outcome::kFound);
  EXPECT_EQ(router.find("GET", "/v1/models/").outcome, Router::Outcome::kFound);
  EXPECT_EQ(router.find("HEAD", "/v1/models").outcome, Router::Outcome::kFound);
  Router::Match prefix = router.find("GET", "/v1/models/abc");
  ASSERT_EQ(prefix.outcome, Router::Outcome::kFound);
  EXPECT_EQ(prefix.path_rest, "abc");
  EXPECT_EQ(prefix.route, "/v1/models/*");
  Router::Match wrong_method = router.find("DELETE", "/generate");
  EXPECT_EQ(wrong_method.outcome, Router::Outcome::kMethodNotAllowed);
  EXPECT_EQ(wrong_method.allowed_methods, "GET, HEAD, POST");  // HEAD is served by GET
  EXPECT_EQ(router.find("GET", "/nope").outcome, Router::Outcome::kNotFound);
  EXPECT_THROW(router.add("POST", "/generate", [](const std::shared_ptr<HttpExchange>&) {}), std::exception);
}

}  // namespace
}  // namespace fathom::server
