#include "chat/jinja_methods.h"

#include <algorithm>

#include "chat/jinja_operations.h"
#include "chat/python_text.h"

namespace fathom::chat::jinja {

namespace {

using Method = std::function<Value(const Value& self, const CallArgs& args)>;

Value bind_method(const Value& self, const std::string& name, Method method) {
  return Value::callable(name, [self, method = std::move(method)](const CallArgs& args) { return method(self, args); });
}

Value unsafe_method(const Value& self, const std::string& name) {
  return Value::undefined("access to attribute '" + name + "' of '" + self.type_name() + "' object is unsafe.");
}

std::optional<std::string> optional_string(const BoundArgs& bound, size_t index, const std::string& what) {
  const Value* value = bound.get(index);
  if (!value || value->is_none()) return std::nullopt;
  if (!value->is_string()) throw_render_error(what + " must be str or None, not " + value->type_name());
  return value->as_string();
}

const std::string& require_string(const Value* value, const std::string& what) {
  if (!value) throw_render_error(what + " is missing");
  if (!value->is_string()) throw_render_error(what + " must be str, not " + value->type_name());
  return value->as_string();
}

int64_t optional_int(const BoundArgs& bound, size_t index, int64_t fallback) {
  const Value* value = bound.get(index);
  if (!value || value->is_none()) return fallback;
  if (!value->is_integral()) throw_render_error("an integer is required, got " + value->type_name());
  return value->as_int();
}

Value string_list(const std::vector<std::string>& parts) {
  std::vector<Value> items;
  items.reserve(parts.size());
  for (const std::string& part : parts) items.push_back(Value::string(part));
  return Value::list(std::move(items));
}

// Python's s[start:end] for the optional start/end arguments of find/startswith/count.
std::string string_window(const Value& self, const BoundArgs& bound, size_t start_index) {
  const Value* start = bound.get(start_index);
  const Value* end = bound.get(start_index + 1);
  if (!start && !end) return self.as_string();
  Value window = slice(self, start ? std::optional<Value>(*start) : std::nullopt,
                       end ? std::optional<Value>(*end) : std::nullopt, std::nullopt);
  return window.as_string();
}

int64_t code_point_offset(const Value& self, const BoundArgs& bound, size_t start_index) {
  const Value* start = bound.get(start_index);
  if (!start || start->is_none()) return 0;
  Value prefix = slice(self, std::nullopt, *start, std::nullopt);
  return static_cast<int64_t>(count_code_points(prefix.as_string()));
}

bool affix_matches(const Value& affixes, const std::string& text, bool at_start) {
  auto matches = [&](const Value& affix) {
    if (!affix.is_string()) throw_render_error("startswith/endswith arg must be str or a tuple of str");
    const std::string& a = affix.as_string();
    if (a.size() > text.size()) return false;
    return at_start ? text.compare(0, a.size(), a) == 0 : text.compare(text.size() - a.size(), a.size(), a) == 0;
  };
  if (affixes.is_list()) return std::any_of(affixes.as_list().items.begin(), affixes.as_list().items.end(), matches);
  return matches(affixes);
}

std::string python_title(const std::string& text) {
  std::string out;
  bool previous_cased = false;
  for (char c : text) {
    bool is_upper = c >= 'A' && c <= 'Z', is_lower = c >= 'a' && c <= 'z';
    if (is_upper || is_lower) {
      if (!previous_cased && is_lower) c = static_cast<char>(c - 'a' + 'A');
      if (previous_cased && is_upper) c = static_cast<char>(c - 'A' + 'a');
      previous_cased = true;
    } else {
      previous_cased = false;
    }
    out.push_back(c);
  }
  return out;
}

template <typename Predicate>
Value all_code_points(const Value& self, Predicate predicate) {
  std::u32string code_points = decode_utf8(self.as_string());
  return Value::boolean(!code_points.empty() && std::all_of(code_points.begin(), code_points.end(), predicate));
}

std::optional<Value> find_string_method(const Value& self, const std::string& name) {
  if (name == "split" || name == "rsplit") {
    bool from_right = name == "rsplit";
    return bind_method(self, name, [from_right, name](const Value& s, const CallArgs& args) {
      BoundArgs bound(name, args, {"sep", "maxsplit"});
      auto separator = optional_string(bound, 0, "separator");
      if (separator && separator->empty()) throw_render_error("empty separator");
      int64_t max_split = optional_int(bound, 1, -1);
      return string_list(from_right ? python_rsplit(s.as_string(), separator, max_split)
                                    : python_split(s.as_string(), separator, max_split));
    });
  }
  if (name == "splitlines")
    return bind_method(self, name, [](const Value& s, const CallArgs&) { return string_list(python_splitlines(s.as_string())); });
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    StripSide side = name == "strip" ? StripSide::Both : name == "lstrip" ? StripSide::Left : StripSide::Right;
    return bind_method(self, name, [side, name](const Value& s, const CallArgs& args) {
      BoundArgs bound(name, args, {"chars"});
      return Value::string(python_strip(s.as_string(), side, optional_string(bound, 0, "chars")));
    });
  }
  if (name == "startswith" || name == "endswith") {
    bool at_start = name == "startswith";
    return bind_method(self, name, [at_start, name](const Value& s, const CallArgs& args) {
      BoundArgs bound(name, args, {"affix", "start", "end"});
      if (!bound.get(0)) throw_render_error(name + "() takes at least 1 argument (0 given)");
      return Value::boolean(affix_matches(*bound.get(0), string_window(s, bound, 1), at_start));
    });
  }
  if (name == "replace") {
    return bind_method(self, name, [](const Value& s, const CallArgs& args) {
      BoundArgs bound("replace", args, {"old", "new", "count"});
      return Value::string(python_replace(s.as_string(), require_string(bound.get(0), "replace() old"),
                                          require_string(bound.get(1), "replace() new"), optional_int(bound, 2, -1)));
    });
  }
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex") {
    bool from_right = name[0] == 'r';
    bool raises = name.find("index") != std::string::npos;
    return bind_method(self, name, [from_right, raises, name](const Value& s, const CallArgs& args) {
      BoundArgs bound(name, args, {"sub", "start", "end"});
      const std::string& needle = require_string(bound.get(0), name + "() argument");
      std::string window = string_window(s, bound, 1);
      size_t found = from_right ? window.rfind(needle) : window.find(needle);
      if (found == std::string::npos) {
        if (raises) throw_render_error("substring not found");
        return Value::integer(-1);
      }
      return Value::integer(code_point_offset(s, bound, 1) +
                            static_cast<int64_t>(count_code_points(std::string_view(window).substr(0, found))));
    });
  }
  if (name == "count") {
    return bind_method(self, name, [](const Value& s, const CallArgs& args) {
      BoundArgs bound("count", args, {"sub", "start", "end"});
      const std::string& needle = require_string(bound.get(0), "count() argument");
      std::string window = string_window(s, bound, 1);
      if (needle.empty()) return Value::integer(static_cast<int64_t>(count_code_points(window)) + 1);
      int64_t occurrences = 0;
      for (size_t at = window.find(needle); at != std::string::npos; at = window.find(needle, at + needle.size()))
        ++occurrences;
      return Value::integer(occurrences);
    });
  }
  if (name == "upper")
    return bind_method(self, name, [](const Value& s, const CallArgs&) { return Value::string(ascii_upper(s.as_string())); });
  if (name == "lower")
    return bind_method(self, name, [](const Value& s, const CallArgs&) { return Value::string(ascii_lower(s.as_string())); });
  if (name == "capitalize")
    return bind_method(self, name, [](const Value& s, const CallArgs&) { return Value::string(python_capitalize(s.as_string())); });
  if (name == "title")
    return bind_method(self, name, [](const Value& s, const CallArgs&) { return Value::string(python_title(s.as_string())); });
  if (name == "join") {
    return bind_method(self, name, [](const Value& s, const CallArgs& args) {
      BoundArgs bound("join", args, {"iterable"});
      if (!bound.get(0)) throw_render_error("join() takes exactly one argument (0 given)");
      std::string out;
      bool first = true;
      for (const Value& item : iterate(*bound.get(0))) {
        if (!item.is_string()) throw_render_error("sequence item: expected str instance, " + item.type_name() + " found");
        if (!first) out += s.as_string();
        out += item.as_string();
        first = false;
      }
      return Value::string(out);
    });
  }
  if (name == "removeprefix" || name == "removesuffix") {
    bool prefix = name == "removeprefix";
    return bind_method(self, name, [prefix, name](const Value& s, const CallArgs& args) {
      BoundArgs bound(name, args, {"affix"});
      const std::string& affix = require_string(bound.get(0), name + "() argument");
      const std::string& text = s.as_string();
      if (!affix_matches(Value::string(affix), text, prefix)) return s;
      return Value::string(prefix ? text.substr(affix.size()) : text.substr(0, text.size() - affix.size()));
    });
  }
  if (name == "isdigit")
    return bind_method(self, name, [](const Value& s, const CallArgs&) {
      return all_code_points(s, [](char32_t c) { return c >= '0' && c <= '9'; });
    });
  if (name == "isspace")
    return bind_method(self, name, [](const Value& s, const CallArgs&) { return all_code_points(s, is_python_space); });
  if (name == "isalpha")
    return bind_method(self, name, [](const Value& s, const CallArgs&) {
      return all_code_points(s, [](char32_t c) { return (c | 0x20) >= 'a' && (c | 0x20) <= 'z'; });
    });
  if (name == "isalnum")
    return bind_method(self, name, [](const Value& s, const CallArgs&) {
      return all_code_points(s, [](char32_t c) { return ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') || (c >= '0' && c <= '9'); });
    });
  if (name == "islower" || name == "isupper") {
    bool want_lower = name == "islower";
    return bind_method(self, name, [want_lower](const Value& s, const CallArgs&) {
      const std::string& text = s.as_string();
      bool any_cased = false;
      for (char c : text) {
        bool lower = c >= 'a' && c <= 'z', upper = c >= 'A' && c <= 'Z';
        if ((want_lower && upper) || (!want_lower && lower)) return Value::boolean(false);
        any_cased = any_cased || lower || upper;
      }
      return Value::boolean(any_cased);
    });
  }
  return std::nullopt;
}

std::optional<Value> find_dict_method(const Value& self, const std::string& name) {
  if (name == "get") {
    return bind_method(self, name, [](const Value& d, const CallArgs& args) {
      BoundArgs bound("get", args, {"key", "default"});
      if (!bound.get(0)) throw_render_error("get expected at least 1 argument, got 0");
      const Value* found = d.as_dict().find(*bound.get(0));
      return found ? *found : bound.get_or(1, Value::none());
    });
  }
  if (name == "items") {
    return bind_method(self, name, [](const Value& d, const CallArgs&) {
      std::vector<Value> pairs;
      for (const auto& [key, value] : d.as_dict().entries) pairs.push_back(Value::list({key, value}, SequenceKind::Tuple));
      return Value::list(std::move(pairs));
    });
  }
  if (name == "keys") return bind_method(self, name, [](const Value& d, const CallArgs&) { return Value::list(iterate(d)); });
  if (name == "values") {
    return bind_method(self, name, [](const Value& d, const CallArgs&) {
      std::vector<Value> values;
      for (const auto& entry : d.as_dict().entries) values.push_back(entry.second);
      return Value::list(std::move(values));
    });
  }
  if (name == "copy") return bind_method(self, name, [](const Value& d, const CallArgs&) { return d; });
  if (name == "clear" || name == "pop" || name == "popitem" || name == "setdefault" || name == "update")
    return unsafe_method(self, name);
  return std::nullopt;
}

std::optional<Value> find_list_method(const Value& self, const std::string& name) {
  if (self.as_list().kind == SequenceKind::Iterator) return std::nullopt;
  if (name == "index" || name == "count") {
    bool counting = name == "count";
    return bind_method(self, name, [counting, name](const Value& l, const CallArgs& args) {
      BoundArgs bound(name, args, {"value"});
      if (!bound.get(0)) throw_render_error(name + "() takes exactly one argument (0 given)");
      int64_t occurrences = 0;
      const auto& items = l.as_list().items;
      for (size_t i = 0; i < items.size(); ++i) {
        if (!equals(items[i], *bound.get(0))) continue;
        if (!counting) return Value::integer(static_cast<int64_t>(i));
        ++occurrences;
      }
      if (!counting) throw_render_error(to_repr(*bound.get(0)) + " is not in list");
      return Value::integer(occurrences);
    });
  }
  if (self.as_list().kind == SequenceKind::List &&
      (name == "append" || name == "extend" || name == "insert" || name == "pop" || name == "remove" ||
       name == "clear" || name == "sort" || name == "reverse"))
    return unsafe_method(self, name);
  return std::nullopt;
}

}  // namespace

std::optional<Value> find_method(const Value& object, const std::string& name) {
  switch (object.kind()) {
    case Value::Kind::String: return find_string_method(object, name);
    case Value::Kind::Dict: return find_dict_method(object, name);
    case Value::Kind::List: return find_list_method(object, name);
    default: return std::nullopt;
  }
}

}  // namespace fathom::chat::jinja
