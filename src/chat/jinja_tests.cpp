#include "chat/jinja_tests.h"

#include <unordered_map>

#include "chat/jinja_filters.h"
#include "chat/jinja_operations.h"

namespace fathom::chat::jinja {

namespace {

using TestFunction = bool (*)(const Value&, const CallArgs&);

const Value& argument(const CallArgs& args, const char* test_name) {
  if (args.positional.empty()) throw_render_error(std::string("test '") + test_name + "' needs an argument");
  return args.positional[0];
}

bool has_cased_only(const Value& value, bool want_lower) {
  std::string text = to_str(value);
  bool any_cased = false;
  for (char c : text) {
    bool lower = c >= 'a' && c <= 'z', upper = c >= 'A' && c <= 'Z';
    if ((want_lower && upper) || (!want_lower && lower)) return false;
    any_cased = any_cased || lower || upper;
  }
  return any_cased;
}

bool is_same_object(const Value& a, const Value& b) {
  if (a.kind() != b.kind()) return false;
  if (a.identity() != nullptr) return a.identity() == b.identity();
  return equals(a, b);  // Python caches None/True/False/small ints; scalars behave as identical
}

const std::unordered_map<std::string, TestFunction>& test_table() {
  static const std::unordered_map<std::string, TestFunction> table = {
      {"defined", [](const Value& v, const CallArgs&) { return !v.is_undefined(); }},
      {"undefined", [](const Value& v, const CallArgs&) { return v.is_undefined(); }},
      {"none", [](const Value& v, const CallArgs&) { return v.is_none(); }},
      {"boolean", [](const Value& v, const CallArgs&) { return v.is_bool(); }},
      {"true", [](const Value& v, const CallArgs&) { return v.is_bool() && v.as_bool(); }},
      {"false", [](const Value& v, const CallArgs&) { return v.is_bool() && !v.as_bool(); }},
      {"integer", [](const Value& v, const CallArgs&) { return v.is_int(); }},
      {"float", [](const Value& v, const CallArgs&) { return v.is_float(); }},
      {"number", [](const Value& v, const CallArgs&) { return v.is_number(); }},
      {"string", [](const Value& v, const CallArgs&) { return v.is_string(); }},
      {"mapping", [](const Value& v, const CallArgs&) { return v.is_dict(); }},
      {"iterable", [](const Value& v, const CallArgs&) { return v.is_string() || v.is_list() || v.is_dict() || v.is_undefined(); }},
      {"sequence",
       [](const Value& v, const CallArgs&) {
         return v.is_string() || v.is_dict() || v.is_undefined() || (v.is_list() && v.as_list().kind != SequenceKind::Iterator);
       }},
      {"callable", [](const Value& v, const CallArgs&) { return v.is_callable() || v.is_undefined(); }},
      {"escaped", [](const Value&, const CallArgs&) { return false; }},
      {"lower", [](const Value& v, const CallArgs&) { return has_cased_only(v, true); }},
      {"upper", [](const Value& v, const CallArgs&) { return has_cased_only(v, false); }},
      {"odd", [](const Value& v, const CallArgs&) { return equals(arithmetic(ArithmeticOp::Modulo, v, Value::integer(2)), Value::integer(1)); }},
      {"even", [](const Value& v, const CallArgs&) { return equals(arithmetic(ArithmeticOp::Modulo, v, Value::integer(2)), Value::integer(0)); }},
      {"divisibleby",
       [](const Value& v, const CallArgs& a) {
         return equals(arithmetic(ArithmeticOp::Modulo, v, argument(a, "divisibleby")), Value::integer(0));
       }},
      {"sameas", [](const Value& v, const CallArgs& a) { return is_same_object(v, argument(a, "sameas")); }},
      {"in", [](const Value& v, const CallArgs& a) { return contains(argument(a, "in"), v); }},
      {"filter", [](const Value& v, const CallArgs&) { return v.is_string() && is_known_filter(v.as_string()); }},
      {"test", [](const Value& v, const CallArgs&) { return v.is_string() && is_known_test(v.as_string()); }},
      {"eq", [](const Value& v, const CallArgs& a) { return equals(v, argument(a, "eq")); }},
      {"ne", [](const Value& v, const CallArgs& a) { return !equals(v, argument(a, "ne")); }},
      {"lt", [](const Value& v, const CallArgs& a) { return compare_order(v, argument(a, "lt"), "<") < 0; }},
      {"le", [](const Value& v, const CallArgs& a) { return compare_order(v, argument(a, "le"), "<=") <= 0; }},
      {"gt", [](const Value& v, const CallArgs& a) { return compare_order(v, argument(a, "gt"), ">") > 0; }},
      {"ge", [](const Value& v, const CallArgs& a) { return compare_order(v, argument(a, "ge"), ">=") >= 0; }},
  };
  return table;
}

// Jinja's aliases for the comparison tests.
const std::string& canonical_test_name(const std::string& name) {
  static const std::unordered_map<std::string, std::string> aliases = {
      {"==", "eq"}, {"equalto", "eq"}, {"!=", "ne"}, {"<", "lt"}, {"lessthan", "lt"}, {"<=", "le"},
      {">", "gt"}, {"greaterthan", "gt"}, {">=", "ge"}};
  auto alias = aliases.find(name);
  return alias == aliases.end() ? name : alias->second;
}

}  // namespace

bool is_known_test(const std::string& name) { return test_table().count(canonical_test_name(name)) > 0; }

bool apply_test(const std::string& name, const Value& input, const CallArgs& args) {
  auto found = test_table().find(canonical_test_name(name));
  if (found == test_table().end()) throw_render_error("no test named '" + name + "'");
  return found->second(input, args);
}

}  // namespace fathom::chat::jinja
