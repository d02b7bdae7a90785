#include "server/router.h"

#include "core/error.h"

namespace fathom::server {

void Router::add(const std::string& method, const std::string& path, Handler handler) {
  const bool prefix = path.size() >= 2 && path.compare(path.size() - 2, 2, "/*") == 0;
  const std::string key = prefix ? path.substr(0, path.size() - 1) : path;  // keeps the trailing '/'
  for (Route& route : routes_) {
    if (route.path == key && route.prefix == prefix) {
      FATHOM_CHECK(!route.by_method.count(method), "route " << method << " " << path << " registered twice");
      route.by_method[method] = std::move(handler);
      return;
    }
  }
  Route route;
  route.path = key;
  route.prefix = prefix;
  route.by_method[method] = std::move(handler);
  routes_.push_back(std::move(route));
}

const Router::Route* Router::find_route(std::string_view path, std::string& path_rest) const {
  for (const Route& route : routes_) {
    if (!route.prefix && route.path == path) return &route;
  }
  // Tolerate one trailing slash on exact routes ("/v1/models/").
  if (path.size() > 1 && path.back() == '/') {
    std::string_view trimmed = path.substr(0, path.size() - 1);
    for (const Route& route : routes_) {
      if (!route.prefix && route.path == trimmed) return &route;
    }
  }
  for (const Route& route : routes_) {
    if (route.prefix && path.size() > route.path.size() && path.substr(0, route.path.size()) == route.path) {
      path_rest = std::string(path.substr(route.path.size()));
      return &route;
    }
  }
  return nullptr;
}

Router::Match Router::find(std::string_view method, std::string_view path) const {
  Match match;
  const Route* route = find_route(path, match.path_rest);
  if (route == nullptr) return match;
  match.route = route->prefix ? route->path + "*" : route->path;
  auto it = route->by_method.find(std::string(method));
  if (it == route->by_method.end() && method == "HEAD") it = route->by_method.find("GET");
  if (it != route->by_method.end()) {
    match.outcome = Outcome::kFound;
    match.handler = &it->second;
    return match;
  }
  match.outcome = Outcome::kMethodNotAllowed;
  for (const auto& [allowed, handler] : route->by_method) {
    if (!match.allowed_methods.empty()) match.allowed_methods += ", ";
    match.allowed_methods += allowed;
    if (allowed == "GET" && !route->by_method.count("HEAD")) match.allowed_methods += ", HEAD";  // served by GET
  }
  return match;
}

}  // namespace fathom::server
