#pragma once
// JSON <-> Value: converting request JSON into template values, and `tojson` as transformers defines it
// (Python json.dumps with ensure_ascii=False by default, Python's separators, float repr and escaping).
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "chat/jinja_value.h"

namespace fathom::chat::jinja {

// Object key order is kept (templates dump tool schemas in the order the client sent them).
Value value_from_json(const nlohmann::ordered_json& json);

struct JsonDumpOptions {
  bool ensure_ascii = false;
  std::optional<std::string> indent;  // absent: single line; present: newline + indent per level
  std::optional<std::string> item_separator;  // default ", " single-line, "," when indenting
  std::string key_separator = ": ";
  bool sort_keys = false;
};

// Python json.dumps(value, ...) on a template value; throws for values JSON cannot hold (Undefined, callables).
std::string python_json_dumps(const Value& value, const JsonDumpOptions& options);

}  // namespace fathom::chat::jinja
