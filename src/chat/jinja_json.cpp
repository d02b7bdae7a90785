#include "chat/jinja_json.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "chat/jinja_operations.h"
#include "chat/python_text.h"

namespace fathom::chat::jinja {

namespace {

void append_hex_escape(std::string& out, unsigned code_unit) {
  char buffer[16];
  std::snprintf(buffer, sizeof(buffer), "\\u%04x", code_unit);
  out += buffer;
}

void append_json_string(std::string& out, const std::string& text, bool ensure_ascii) {
  out.push_back('"');
  auto escape_simple = [&](char32_t c) {
    switch (c) {
      case '"': out += "\\\""; return true;
      case '\\': out += "\\\\"; return true;
      case '\n': out += "\\n"; return true;
      case '\r': out += "\\r"; return true;
      case '\t': out += "\\t"; return true;
      case '\b': out += "\\b"; return true;
      case '\f': out += "\\f"; return true;
      default: return false;
    }
  };
  if (!ensure_ascii) {
    for (char byte : text) {
      unsigned char c = static_cast<unsigned char>(byte);
      if (escape_simple(c)) continue;
      if (c < 0x20) {
        append_hex_escape(out, c);
      } else {
        out.push_back(byte);
      }
    }
  } else {
    for (char32_t c : decode_utf8(text)) {
      if (escape_simple(c)) continue;
      if (c >= 0x20 && c <= 0x7E) {
        out.push_back(static_cast<char>(c));
      } else if (c < 0x10000) {
        append_hex_escape(out, static_cast<unsigned>(c));
      } else {
        char32_t offset = c - 0x10000;
        append_hex_escape(out, 0xD800 + static_cast<unsigned>(offset >> 10));
        append_hex_escape(out, 0xDC00 + static_cast<unsigned>(offset & 0x3FF));
      }
    }
  }
  out.push_back('"');
}

std::string json_float(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value < 0 ? "-Infinity" : "Infinity";
  return python_float_repr(value);
}

// json.dumps turns non-string keys into strings this way.
std::string json_key(const Value& key) {
  switch (key.kind()) {
    case Value::Kind::String: return key.as_string();
    case Value::Kind::Bool: return key.as_bool() ? "true" : "false";
    case Value::Kind::None: return "null";
    case Value::Kind::Int: return std::to_string(key.as_int());
    case Value::Kind::Float: return json_float(key.as_float());
    default: throw_render_error("keys must be str, int, float, bool or None, not " + key.type_name());
  }
}

class JsonWriter {
 public:
  explicit JsonWriter(const JsonDumpOptions& options)
      : options_(options),
        item_separator_(options.item_separator ? *options.item_separator : (options.indent ? "," : ", ")) {}

  void write(const Value& value, int depth) {
    switch (value.kind()) {
      case Value::Kind::None: out_ += "null"; return;
      case Value::Kind::Bool: out_ += value.as_bool() ? "true" : "false"; return;
      case Value::Kind::Int: out_ += std::to_string(value.as_int()); return;
      case Value::Kind::Float: out_ += json_float(value.as_float()); return;
      case Value::Kind::String: append_json_string(out_, value.as_string(), options_.ensure_ascii); return;
      case Value::Kind::List:
        if (value.as_list().kind != SequenceKind::Iterator) {
          write_array(value.as_list().items, depth);
          return;
        }
        break;
      case Value::Kind::Dict: write_object(value.as_dict(), depth); return;
      default: break;
    }
    throw_render_error("Object of type " + value.type_name() + " is not JSON serializable");
  }

  std::string take() { return std::move(out_); }

 private:
  void newline_indent(int depth) {
    if (!options_.indent) return;
    out_.push_back('\n');
    for (int i = 0; i < depth; ++i) out_ += *options_.indent;
  }

  void write_array(const std::vector<Value>& items, int depth) {
    if (items.empty()) {
      out_ += "[]";
      return;
    }
    out_.push_back('[');
    newline_indent(depth + 1);
    for (size_t i = 0; i < items.size(); ++i) {
      if (i) {
        out_ += item_separator_;
        newline_indent(depth + 1);
      }
      write(items[i], depth + 1);
    }
    newline_indent(depth);
    out_.push_back(']');
  }

  void write_object(const DictData& dict, int depth) {
    if (dict.entries.empty()) {
      out_ += "{}";
      return;
    }
    std::vector<const std::pair<Value, Value>*> entries;
    for (const auto& entry : dict.entries) entries.push_back(&entry);
    if (options_.sort_keys)
      std::stable_sort(entries.begin(), entries.end(), [](const auto* a, const auto* b) {
        return compare_order(a->first, b->first, "<") < 0;
      });
    out_.push_back('{');
    newline_indent(depth + 1);
    for (size_t i = 0; i < entries.size(); ++i) {
      if (i) {
        out_ += item_separator_;
        newline_indent(depth + 1);
      }
      append_json_string(out_, json_key(entries[i]->first), options_.ensure_ascii);
      out_ += options_.key_separator;
      write(entries[i]->second, depth + 1);
    }
    newline_indent(depth);
    out_.push_back('}');
  }

  const JsonDumpOptions& options_;
  std::string item_separator_;
  std::string out_;
};

// Request JSON is untrusted: bound the recursion so deeply nested input is an error, not a stack overflow.
constexpr int kMaxJsonDepth = 512;

Value value_from_json_at_depth(const nlohmann::ordered_json& json, int depth) {
  using Type = nlohmann::ordered_json::value_t;
  if (depth > kMaxJsonDepth) throw_render_error("template input JSON is nested more than 512 levels deep");
  switch (json.type()) {
    case Type::null: return Value::none();
    case Type::boolean: return Value::boolean(json.get<bool>());
    case Type::number_integer: return Value::integer(json.get<int64_t>());
    case Type::number_unsigned: {
      uint64_t number = json.get<uint64_t>();
      if (number <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        return Value::integer(static_cast<int64_t>(number));
      return Value::floating(static_cast<double>(number));
    }
    case Type::number_float: return Value::floating(json.get<double>());
    case Type::string: return Value::string(json.get<std::string>());
    case Type::array: {
      std::vector<Value> items;
      items.reserve(json.size());
      for (const auto& element : json) items.push_back(value_from_json_at_depth(element, depth + 1));
      return Value::list(std::move(items));
    }
    case Type::object: {
      DictData dict;
      dict.entries.reserve(json.size());
      for (const auto& [key, element] : json.items())
        dict.entries.emplace_back(Value::string(key), value_from_json_at_depth(element, depth + 1));
      return Value::dict(std::move(dict));
    }
    default: throw_render_error("unsupported JSON value type in template input");
  }
}

}  // namespace

Value value_from_json(const nlohmann::ordered_json& json) { return value_from_json_at_depth(json, 0); }

std::string python_json_dumps(const Value& value, const JsonDumpOptions& options) {
  JsonWriter writer(options);
  writer.write(value, 0);
  return writer.take();
}

}  // namespace fathom::chat::jinja
