#pragma once
// Maps (method, path) to a handler: exact paths, or a prefix when the registered path ends in "/*".
// HEAD is served by the GET handler. Distinguishes unknown paths (404) from wrong methods (405 + Allow).
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace fathom::server {

class HttpExchange;

class Router {
 public:
  using Handler = std::function<void(const std::shared_ptr<HttpExchange>&)>;

  void add(const std::string& method, const std::string& path, Handler handler);

  enum class Outcome { kFound, kNotFound, kMethodNotAllowed };
  struct Match {
    Outcome outcome = Outcome::kNotFound;
    const Handler* handler = nullptr;
    std::string allowed_methods;  // "GET, POST" for kMethodNotAllowed
    std::string path_rest;        // the part after a prefix route's "/"
    std::string route;            // the registered path ("/v1/models/*"), for metrics labels
  };
  Match find(std::string_view method, std::string_view path) const;

 private:
  struct Route {
    std::string path;
    bool prefix = false;
    std::map<std::string, Handler> by_method;
  };
  const Route* find_route(std::string_view path, std::string& path_rest) const;
  std::vector<Route> routes_;
};

}  // namespace fathom::server
