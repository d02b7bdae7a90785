#include "chat/jinja_filters.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <unordered_map>

#include "chat/jinja_json.h"
#include "chat/jinja_methods.h"
#include "chat/jinja_operations.h"
#include "chat/jinja_tests.h"
#include "chat/python_text.h"

namespace fathom::chat::jinja {

namespace {

using FilterFunction = Value (*)(const Value& input, const CallArgs& args);

std::string string_argument(const BoundArgs& bound, size_t index, const std::string& fallback) {
  const Value* value = bound.get(index);
  return value ? to_str(*value) : fallback;
}

bool bool_argument(const BoundArgs& bound, size_t index, bool fallback) {
  const Value* value = bound.get(index);
  return value ? truthy(*value) : fallback;
}

// Jinja's ignore_case postprocess for sort/unique/min/max when case_sensitive is false.
Value sort_key(const Value& item, const Value* attribute, bool case_sensitive) {
  Value key = attribute && !attribute->is_none() ? lookup_attribute_path(item, *attribute) : item;
  if (!case_sensitive && key.is_string()) return Value::string(ascii_lower(key.as_string()));
  return key;
}

Value make_iterator(std::vector<Value> items) { return Value::list(std::move(items), SequenceKind::Iterator); }

// Python int(str): optional sign, surrounding whitespace and single underscores between digits.
std::optional<int64_t> parse_python_int(const std::string& text, int base) {
  std::string cleaned = python_strip(text, StripSide::Both, std::nullopt);
  std::string digits;
  size_t i = 0;
  bool negative = false;
  if (i < cleaned.size() && (cleaned[i] == '+' || cleaned[i] == '-')) negative = cleaned[i++] == '-';
  if (cleaned.size() >= i + 2 && cleaned[i] == '0' && base != 10) {
    char prefix = static_cast<char>(cleaned[i + 1] | 0x20);
    if ((base == 16 && prefix == 'x') || (base == 8 && prefix == 'o') || (base == 2 && prefix == 'b')) i += 2;
  }
  for (; i < cleaned.size(); ++i) {
    if (cleaned[i] == '_' && !digits.empty() && i + 1 < cleaned.size() && cleaned[i + 1] != '_') continue;
    digits.push_back(cleaned[i]);
  }
  if (digits.empty()) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  long long value = std::strtoll(digits.c_str(), &end, base);
  if (errno != 0 || *end != '\0' || digits[0] == '-' || digits[0] == '+') return std::nullopt;
  return negative ? -value : value;
}

// Python float(str): whitespace allowed, "inf"/"nan" spellings accepted.
std::optional<double> parse_python_float(const std::string& text) {
  std::string cleaned = python_strip(text, StripSide::Both, std::nullopt);
  if (cleaned.empty()) return std::nullopt;
  char* end = nullptr;
  double value = std::strtod(cleaned.c_str(), &end);
  if (*end != '\0') return std::nullopt;
  return value;
}

Value filter_default(const Value& input, const CallArgs& args) {
  BoundArgs bound("default", args, {"default_value", "boolean"});
  if (input.is_undefined() || (bool_argument(bound, 1, false) && !truthy(input)))
    return bound.get_or(0, Value::string(""));
  return input;
}

Value filter_length(const Value& input, const CallArgs&) { return Value::integer(length(input)); }

Value filter_string(const Value& input, const CallArgs&) { return Value::string(to_str(input)); }

Value filter_trim(const Value& input, const CallArgs& args) {
  BoundArgs bound("trim", args, {"chars"});
  const Value* chars = bound.get(0);
  std::optional<std::string> set;
  if (chars && !chars->is_none()) set = to_str(*chars);
  return Value::string(python_strip(to_str(input), StripSide::Both, set));
}

Value filter_upper(const Value& input, const CallArgs&) { return Value::string(ascii_upper(to_str(input))); }
Value filter_lower(const Value& input, const CallArgs&) { return Value::string(ascii_lower(to_str(input))); }
Value filter_capitalize(const Value& input, const CallArgs&) { return Value::string(python_capitalize(to_str(input))); }
Value filter_title(const Value& input, const CallArgs&) { return Value::string(jinja_title(to_str(input))); }

Value filter_replace(const Value& input, const CallArgs& args) {
  BoundArgs bound("replace", args, {"old", "new", "count"});
  if (!bound.get(0) || !bound.get(1)) throw_render_error("replace filter needs 'old' and 'new'");
  const Value* count = bound.get(2);
  int64_t limit = count && !count->is_none() ? count->as_int() : -1;
  return Value::string(python_replace(to_str(input), to_str(*bound.get(0)), to_str(*bound.get(1)), limit));
}

Value filter_int(const Value& input, const CallArgs& args) {
  BoundArgs bound("int", args, {"default", "base"});
  Value fallback = bound.get_or(0, Value::integer(0));
  if (input.is_undefined()) fail_undefined(input);
  if (input.is_integral()) return Value::integer(input.as_int());
  auto truncate = [&](double value) {
    // Outside int64 Python would make a big int; we cannot, so the filter's default applies.
    if (!std::isfinite(value) || std::fabs(value) >= 9.2e18) return fallback;
    return Value::integer(static_cast<int64_t>(std::trunc(value)));
  };
  if (input.is_float()) return truncate(input.as_float());
  if (input.is_string()) {
    int base = static_cast<int>(bound.get_or(1, Value::integer(10)).as_int());
    if (auto parsed = parse_python_int(input.as_string(), base)) return Value::integer(*parsed);
    if (auto parsed = parse_python_float(input.as_string())) return truncate(*parsed);
  }
  return fallback;
}

Value filter_float(const Value& input, const CallArgs& args) {
  BoundArgs bound("float", args, {"default"});
  if (input.is_undefined()) fail_undefined(input);
  if (input.is_number()) return Value::floating(input.as_float());
  if (input.is_string())
    if (auto parsed = parse_python_float(input.as_string())) return Value::floating(*parsed);
  return bound.get_or(0, Value::floating(0.0));
}

Value filter_abs(const Value& input, const CallArgs&) {
  if (input.is_integral()) return Value::integer(std::llabs(input.as_int()));
  if (input.is_float()) return Value::floating(std::fabs(input.as_float()));
  throw_render_error("bad operand type for abs(): '" + input.type_name() + "'");
}

Value filter_round(const Value& input, const CallArgs& args) {
  BoundArgs bound("round", args, {"precision", "method"});
  int64_t precision = bound.get_or(0, Value::integer(0)).as_int();
  std::string method = string_argument(bound, 1, "common");
  if (method != "common" && method != "ceil" && method != "floor")
    throw_render_error("method must be common, ceil or floor");
  if (!input.is_number()) throw_render_error("type " + input.type_name() + " doesn't define __round__ method");
  double scale = std::pow(10.0, static_cast<double>(precision));
  if (method == "common") {
    if (input.is_integral()) return Value::integer(input.as_int());  // Python round(int, n) stays int
    return Value::floating(std::nearbyint(input.as_float() * scale) / scale);
  }
  double scaled = input.as_float() * scale;
  return Value::floating((method == "ceil" ? std::ceil(scaled) : std::floor(scaled)) / scale);
}

Value filter_first(const Value& input, const CallArgs&) {
  if (input.is_undefined()) return Value::undefined("No first item, sequence was empty.");
  std::vector<Value> items = iterate(input);
  return items.empty() ? Value::undefined("No first item, sequence was empty.") : items.front();
}

Value filter_last(const Value& input, const CallArgs&) {
  if (input.is_list() && input.as_list().kind == SequenceKind::Iterator)
    throw_render_error("'generator' object is not reversible");
  std::vector<Value> items = iterate(input);
  return items.empty() ? Value::undefined("No last item, sequence was empty.") : items.back();
}

Value filter_list(const Value& input, const CallArgs&) { return Value::list(iterate(input)); }

Value filter_items(const Value& input, const CallArgs&) {
  if (input.is_undefined()) return make_iterator({});
  if (!input.is_dict()) throw_render_error("Can only get item pairs from a mapping.");
  std::vector<Value> pairs;
  for (const auto& [key, value] : input.as_dict().entries) pairs.push_back(Value::list({key, value}, SequenceKind::Tuple));
  return make_iterator(std::move(pairs));
}

Value filter_join(const Value& input, const CallArgs& args) {
  BoundArgs bound("join", args, {"d", "attribute"});
  std::string separator = string_argument(bound, 0, "");
  const Value* attribute = bound.get(1);
  std::string out;
  bool first = true;
  for (const Value& item : iterate(input)) {
    if (!first) out += separator;
    out += to_str(attribute && !attribute->is_none() ? lookup_attribute_path(item, *attribute) : item);
    first = false;
  }
  return Value::string(out);
}

Value filter_reverse(const Value& input, const CallArgs&) {
  if (input.is_string()) return slice(input, std::nullopt, std::nullopt, Value::integer(-1));
  std::vector<Value> items = iterate(input);
  std::reverse(items.begin(), items.end());
  bool was_iterator = input.is_list() && input.as_list().kind == SequenceKind::Iterator;
  return was_iterator ? Value::list(std::move(items)) : make_iterator(std::move(items));
}

Value filter_sort(const Value& input, const CallArgs& args) {
  BoundArgs bound("sort", args, {"reverse", "case_sensitive", "attribute"});
  bool reverse = bool_argument(bound, 0, false);
  bool case_sensitive = bool_argument(bound, 1, false);
  const Value* attribute = bound.get(2);
  std::vector<Value> items = iterate(input);
  std::vector<std::pair<Value, Value>> keyed;
  for (Value& item : items) keyed.emplace_back(sort_key(item, attribute, case_sensitive), std::move(item));
  std::stable_sort(keyed.begin(), keyed.end(), [reverse](const auto& a, const auto& b) {
    return reverse ? compare_order(b.first, a.first, "<") < 0 : compare_order(a.first, b.first, "<") < 0;
  });
  std::vector<Value> sorted;
  for (auto& entry : keyed) sorted.push_back(std::move(entry.second));
  return Value::list(std::move(sorted));
}

Value filter_dictsort(const Value& input, const CallArgs& args) {
  BoundArgs bound("dictsort", args, {"case_sensitive", "by", "reverse"});
  if (!input.is_dict()) throw_render_error("dictsort needs a mapping");
  bool case_sensitive = bool_argument(bound, 0, false);
  std::string by = string_argument(bound, 1, "key");
  if (by != "key" && by != "value") throw_render_error("You can only sort by either \"key\" or \"value\"");
  bool reverse = bool_argument(bound, 2, false);
  std::vector<Value> pairs;
  for (const auto& [key, value] : input.as_dict().entries) pairs.push_back(Value::list({key, value}, SequenceKind::Tuple));
  size_t position = by == "key" ? 0 : 1;
  std::stable_sort(pairs.begin(), pairs.end(), [&](const Value& a, const Value& b) {
    Value ka = sort_key(a.as_list().items[position], nullptr, case_sensitive);
    Value kb = sort_key(b.as_list().items[position], nullptr, case_sensitive);
    return reverse ? compare_order(kb, ka, "<") < 0 : compare_order(ka, kb, "<") < 0;
  });
  return Value::list(std::move(pairs));
}

Value filter_unique(const Value& input, const CallArgs& args) {
  BoundArgs bound("unique", args, {"case_sensitive", "attribute"});
  bool case_sensitive = bool_argument(bound, 0, false);
  const Value* attribute = bound.get(1);
  std::vector<Value> seen, unique;
  for (const Value& item : iterate(input)) {
    Value key = sort_key(item, attribute, case_sensitive);
    if (std::any_of(seen.begin(), seen.end(), [&](const Value& s) { return equals(s, key); })) continue;
    seen.push_back(key);
    unique.push_back(item);
  }
  return make_iterator(std::move(unique));
}

Value min_or_max(const Value& input, const CallArgs& args, bool want_max) {
  BoundArgs bound(want_max ? "max" : "min", args, {"case_sensitive", "attribute"});
  bool case_sensitive = bool_argument(bound, 0, false);
  const Value* attribute = bound.get(1);
  std::vector<Value> items = iterate(input);
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  size_t best = 0;
  for (size_t i = 1; i < items.size(); ++i) {
    int order = compare_order(sort_key(items[i], attribute, case_sensitive),
                              sort_key(items[best], attribute, case_sensitive), "<");
    if (want_max ? order > 0 : order < 0) best = i;
  }
  return items[best];
}

Value filter_min(const Value& input, const CallArgs& args) { return min_or_max(input, args, false); }
Value filter_max(const Value& input, const CallArgs& args) { return min_or_max(input, args, true); }

Value filter_sum(const Value& input, const CallArgs& args) {
  BoundArgs bound("sum", args, {"attribute", "start"});
  const Value* attribute = bound.get(0);
  Value total = bound.get_or(1, Value::integer(0));
  for (const Value& item : iterate(input))
    total = arithmetic(ArithmeticOp::Add, total,
                       attribute && !attribute->is_none() ? lookup_attribute_path(item, *attribute) : item);
  return total;
}

Value filter_map(const Value& input, const CallArgs& args) {
  std::vector<Value> mapped;
  if (args.positional.empty()) {
    const Value* attribute = nullptr;
    Value fallback = Value::none();
    for (const auto& [keyword, value] : args.keyword) {
      if (keyword == "attribute") attribute = &value;
      else if (keyword == "default") fallback = value;
      else throw_render_error("Unexpected keyword argument '" + keyword + "'");
    }
    if (!attribute) throw_render_error("map requires a filter argument");
    for (const Value& item : iterate(input)) {
      Value found = lookup_attribute_path(item, *attribute);
      mapped.push_back(found.is_undefined() && !fallback.is_none() ? fallback : found);
    }
    return make_iterator(std::move(mapped));
  }
  std::string filter_name = to_str(args.positional[0]);
  CallArgs rest{std::vector<Value>(args.positional.begin() + 1, args.positional.end()), args.keyword};
  for (const Value& item : iterate(input)) mapped.push_back(apply_filter(filter_name, item, rest));
  return make_iterator(std::move(mapped));
}

// select/reject/selectattr/rejectattr share Jinja's select_or_reject.
Value select_or_reject(const Value& input, const CallArgs& args, bool keep_matching, bool by_attribute) {
  std::vector<Value> kept;
  if (!truthy(input)) return make_iterator({});
  size_t offset = 0;
  const Value* attribute = nullptr;
  if (by_attribute) {
    if (args.positional.empty()) throw_render_error("Missing parameter for attribute name");
    attribute = &args.positional[0];
    offset = 1;
  }
  const Value* test_name = args.positional.size() > offset ? &args.positional[offset] : nullptr;
  CallArgs test_args;
  if (test_name) test_args.positional.assign(args.positional.begin() + static_cast<long>(offset) + 1, args.positional.end());
  test_args.keyword = args.keyword;
  for (const Value& item : iterate(input)) {
    Value subject = attribute ? lookup_attribute_path(item, *attribute) : item;
    bool passes = test_name ? apply_test(to_str(*test_name), subject, test_args) : truthy(subject);
    if (passes == keep_matching) kept.push_back(item);
  }
  return make_iterator(std::move(kept));
}

Value filter_select(const Value& input, const CallArgs& args) { return select_or_reject(input, args, true, false); }
Value filter_reject(const Value& input, const CallArgs& args) { return select_or_reject(input, args, false, false); }
Value filter_selectattr(const Value& input, const CallArgs& args) { return select_or_reject(input, args, true, true); }
Value filter_rejectattr(const Value& input, const CallArgs& args) { return select_or_reject(input, args, false, true); }

Value filter_attr(const Value& input, const CallArgs& args) {
  BoundArgs bound("attr", args, {"name"});
  std::string name = string_argument(bound, 0, "");
  if (input.is_namespace()) return get_attribute(input, name);
  if (auto method = find_method(input, name)) return *method;
  std::string hint = "'";
  hint += input.type_name();
  hint += " object' has no attribute '" + name + "'";
  return Value::undefined(std::move(hint));
}

Value filter_indent(const Value& input, const CallArgs& args) {
  BoundArgs bound("indent", args, {"width", "first", "blank"});
  Value width = bound.get_or(0, Value::integer(4));
  std::string indentation = width.is_string() ? width.as_string() : std::string(static_cast<size_t>(std::max<int64_t>(0, width.as_int())), ' ');
  bool first = bool_argument(bound, 1, false);
  bool blank = bool_argument(bound, 2, false);
  std::vector<std::string> lines = python_splitlines(to_str(input) + "\n");
  std::string out;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i == 0) {
      out = lines[0];
      continue;
    }
    out += "\n";
    if (blank || !lines[i].empty()) out += indentation;
    out += lines[i];
  }
  if (first) out = indentation + out;
  return Value::string(out);
}

// transformers' tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False) = json.dumps(...).
Value filter_tojson(const Value& input, const CallArgs& args) {
  BoundArgs bound("tojson", args, {"ensure_ascii", "indent", "separators", "sort_keys"});
  JsonDumpOptions options;
  options.ensure_ascii = bool_argument(bound, 0, false);
  if (const Value* indent = bound.get(1); indent && !indent->is_none()) {
    if (indent->is_string()) options.indent = indent->as_string();
    else if (indent->is_integral()) options.indent = std::string(static_cast<size_t>(std::max<int64_t>(0, indent->as_int())), ' ');
    else throw_render_error("tojson indent must be an int or a string");
  }
  if (const Value* separators = bound.get(2); separators && !separators->is_none()) {
    std::vector<Value> parts = iterate(*separators);
    if (parts.size() != 2 || !parts[0].is_string() || !parts[1].is_string())
      throw_render_error("tojson separators must be a pair of strings");
    options.item_separator = parts[0].as_string();
    options.key_separator = parts[1].as_string();
  }
  options.sort_keys = bool_argument(bound, 3, false);
  return Value::string(python_json_dumps(input, options));
}

Value filter_safe(const Value& input, const CallArgs&) { return Value::string(to_str(input)); }

Value filter_escape(const Value& input, const CallArgs&) {
  std::string out;
  for (char c : to_str(input)) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out.push_back(c);
    }
  }
  return Value::string(out);
}

Value filter_wordcount(const Value& input, const CallArgs&) {
  int64_t words = 0;
  bool in_word = false;
  for (char32_t c : decode_utf8(to_str(input))) {
    bool word_char = c == '_' || (c >= '0' && c <= '9') || ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') ||
                     (c >= 0x80 && !is_python_space(c));
    if (word_char && !in_word) ++words;
    in_word = word_char;
  }
  return Value::integer(words);
}

const std::unordered_map<std::string, FilterFunction>& filter_table() {
  static const std::unordered_map<std::string, FilterFunction> table = {
      {"abs", filter_abs},           {"attr", filter_attr},
      {"capitalize", filter_capitalize}, {"count", filter_length},
      {"d", filter_default},         {"default", filter_default},
      {"dictsort", filter_dictsort}, {"e", filter_escape},
      {"escape", filter_escape},     {"forceescape", filter_escape},
      {"first", filter_first},       {"float", filter_float},
      {"indent", filter_indent},     {"int", filter_int},
      {"items", filter_items},       {"join", filter_join},
      {"last", filter_last},         {"length", filter_length},
      {"list", filter_list},         {"lower", filter_lower},
      {"map", filter_map},           {"max", filter_max},
      {"min", filter_min},           {"reject", filter_reject},
      {"rejectattr", filter_rejectattr}, {"replace", filter_replace},
      {"reverse", filter_reverse},   {"round", filter_round},
      {"safe", filter_safe},         {"select", filter_select},
      {"selectattr", filter_selectattr}, {"sort", filter_sort},
      {"string", filter_string},     {"sum", filter_sum},
      {"title", filter_title},       {"tojson", filter_tojson},
      {"trim", filter_trim},         {"unique", filter_unique},
      {"upper", filter_upper},       {"wordcount", filter_wordcount},
  };
  return table;
}

}  // namespace

bool is_known_filter(const std::string& name) { return filter_table().count(name) > 0; }

Value apply_filter(const std::string& name, const Value& input, const CallArgs& args) {
  auto found = filter_table().find(name);
  if (found == filter_table().end()) throw_render_error("no filter named '" + name + "'");
  return found->second(input, args);
}

Value lookup_attribute_path(const Value& object, const Value& path) {
  if (path.is_integral()) return get_item(object, path);
  Value current = object;
  for (const std::string& part : python_split(to_str(path), std::string("."), -1)) {
    bool numeric = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
    current = get_item(current, numeric ? Value::integer(std::stoll(part)) : Value::string(part));
  }
  return current;
}

}  // namespace fathom::chat::jinja
