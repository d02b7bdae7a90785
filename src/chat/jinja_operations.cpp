#include "chat/jinja_operations.h"

#include <cmath>

#include "chat/jinja_methods.h"
#include "chat/python_text.h"

namespace fathom::chat::jinja {

namespace {

using Kind = Value::Kind;

// Jinja's object_type_repr: how an object is named in "has no attribute" messages.
std::string object_description(const Value& object) {
  if (object.is_none()) return "None";
  return object.type_name() + " object";
}

Value missing_attribute(const Value& object, const std::string& name) {
  return Value::undefined(std::string("'").append(object_description(object)).append("' has no attribute '").append(name).append("'"));
}

[[noreturn]] void unsupported_operand(const char* op, const Value& left, const Value& right) {
  throw_render_error(std::string("unsupported operand type(s) for ") + op + ": '" + left.type_name() + "' and '" +
                     right.type_name() + "'");
}

// Python ints do not overflow; ours are 64-bit, so overflow is reported instead of wrapping.
template <typename Operation>
int64_t checked_int(Operation operation, int64_t a, int64_t b) {
  int64_t result = 0;
  if (operation(a, b, &result)) throw_render_error("integer overflow in template arithmetic");
  return result;
}
bool add_overflows(int64_t a, int64_t b, int64_t* out) { return __builtin_add_overflow(a, b, out); }
bool sub_overflows(int64_t a, int64_t b, int64_t* out) { return __builtin_sub_overflow(a, b, out); }
bool mul_overflows(int64_t a, int64_t b, int64_t* out) { return __builtin_mul_overflow(a, b, out); }

// Python would try to allocate; a rendered prompt never needs anywhere near this much.
constexpr int64_t kMaxRepeatedSize = int64_t{1} << 28;

void check_repeat_size(size_t unit, int64_t times) {
  if (times > 0 && static_cast<int64_t>(unit) > kMaxRepeatedSize / times)
    throw_render_error("sequence repetition result too large");
}

std::vector<Value> repeat(const std::vector<Value>& items, int64_t times) {
  check_repeat_size(items.size(), times);
  std::vector<Value> out;
  for (int64_t i = 0; i < times; ++i) out.insert(out.end(), items.begin(), items.end());
  return out;
}

std::string repeat(const std::string& text, int64_t times) {
  check_repeat_size(text.size(), times);
  std::string out;
  for (int64_t i = 0; i < times; ++i) out += text;
  return out;
}

// Python's PySlice_AdjustIndices: clamps start/stop for a sequence of `size` items.
std::vector<int64_t> slice_indices(int64_t size, const std::optional<Value>& start_value,
                                   const std::optional<Value>& stop_value, const std::optional<Value>& step_value) {
  auto index_of = [](const std::optional<Value>& value) -> std::optional<int64_t> {
    if (!value || value->is_none()) return std::nullopt;
    if (!value->is_integral()) throw_render_error("slice indices must be integers or None");
    return value->as_int();
  };
  int64_t step = index_of(step_value).value_or(1);
  if (step == 0) throw_render_error("slice step cannot be zero");
  int64_t lower = step > 0 ? 0 : -1;
  int64_t upper = step > 0 ? size : size - 1;
  auto clamp = [&](std::optional<int64_t> index, int64_t fallback) {
    if (!index) return fallback;
    int64_t i = *index;
    if (i < 0) {
      i += size;
      if (i < lower) i = lower;
    } else if (i > upper) {
      i = upper;
    }
    return i;
  };
  int64_t start = clamp(index_of(start_value), step > 0 ? lower : upper);
  int64_t stop = clamp(index_of(stop_value), step > 0 ? upper : lower);
  std::vector<int64_t> picked;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) picked.push_back(i);
  return picked;
}

std::string join_repr(const std::vector<Value>& items) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i) out += ", ";
    out += to_repr(items[i]);
  }
  return out;
}

std::string dict_repr(const DictData& dict) {
  std::string out = "{";
  for (size_t i = 0; i < dict.entries.size(); ++i) {
    if (i) out += ", ";
    out += to_repr(dict.entries[i].first) + ": " + to_repr(dict.entries[i].second);
  }
  return out + "}";
}

}  // namespace

bool truthy(const Value& value) {
  switch (value.kind()) {
    case Kind::Undefined:
    case Kind::None: return false;
    case Kind::Bool: return value.as_bool();
    case Kind::Int: return value.as_int() != 0;
    case Kind::Float: return value.as_float() != 0.0;
    case Kind::String: return !value.as_string().empty();
    case Kind::List: return value.as_list().kind == SequenceKind::Iterator || !value.as_list().items.empty();
    case Kind::Dict: return !value.as_dict().entries.empty();
    case Kind::Namespace:
    case Kind::Callable: return true;
  }
  return false;
}

std::string to_str(const Value& value) {
  switch (value.kind()) {
    case Kind::Undefined: return "";
    case Kind::None: return "None";
    case Kind::Bool: return value.as_bool() ? "True" : "False";
    case Kind::Int: return std::to_string(value.as_int());
    case Kind::Float: return python_float_repr(value.as_float());
    case Kind::String: return value.as_string();
    case Kind::List: {
      const ListData& list = value.as_list();
      if (list.kind == SequenceKind::Iterator) return "<generator object>";
      if (list.kind == SequenceKind::Tuple)
        return "(" + join_repr(list.items) + (list.items.size() == 1 ? ",)" : ")");
      return "[" + join_repr(list.items) + "]";
    }
    case Kind::Dict: return dict_repr(value.as_dict());
    case Kind::Namespace: return "<Namespace " + dict_repr(value.as_namespace().attributes) + ">";
    case Kind::Callable: return "<function " + value.as_callable().name + ">";
  }
  return "";
}

std::string to_repr(const Value& value) {
  if (value.is_string()) return python_string_repr(value.as_string());
  if (value.is_undefined()) return "Undefined";
  return to_str(value);
}

bool equals(const Value& left, const Value& right) {
  if (left.is_number() && right.is_number()) {
    if (left.is_float() || right.is_float()) return left.as_float() == right.as_float();
    return left.as_int() == right.as_int();
  }
  if (left.kind() != right.kind()) return false;
  switch (left.kind()) {
    case Kind::Undefined:
    case Kind::None: return true;
    case Kind::String: return left.as_string() == right.as_string();
    case Kind::List: {
      const ListData& a = left.as_list();
      const ListData& b = right.as_list();
      if (a.kind == SequenceKind::Iterator || b.kind == SequenceKind::Iterator) return &a == &b;
      if (a.kind != b.kind || a.items.size() != b.items.size()) return false;
      for (size_t i = 0; i < a.items.size(); ++i)
        if (!equals(a.items[i], b.items[i])) return false;
      return true;
    }
    case Kind::Dict: {
      const DictData& a = left.as_dict();
      const DictData& b = right.as_dict();
      if (a.entries.size() != b.entries.size()) return false;
      for (const auto& [key, value] : a.entries) {
        const Value* other = b.find(key);
        if (!other || !equals(value, *other)) return false;
      }
      return true;
    }
    default: return left.identity() == right.identity();
  }
}

int compare_order(const Value& left, const Value& right, const char* operator_text) {
  if (left.is_undefined()) fail_undefined(left);
  if (right.is_undefined()) fail_undefined(right);
  if (left.is_number() && right.is_number()) {
    if (left.is_float() || right.is_float()) {
      double a = left.as_float(), b = right.as_float();
      return a < b ? -1 : (a > b ? 1 : 0);
    }
    int64_t a = left.as_int(), b = right.as_int();
    return a < b ? -1 : (a > b ? 1 : 0);
  }
  if (left.is_string() && right.is_string()) {
    int c = left.as_string().compare(right.as_string());  // UTF-8 byte order is code-point order
    return c < 0 ? -1 : (c > 0 ? 1 : 0);
  }
  if (left.is_list() && right.is_list() && left.as_list().kind == right.as_list().kind &&
      left.as_list().kind != SequenceKind::Iterator) {
    const auto& a = left.as_list().items;
    const auto& b = right.as_list().items;
    for (size_t i = 0; i < a.size() && i < b.size(); ++i)
      if (!equals(a[i], b[i])) return compare_order(a[i], b[i], operator_text);
    return a.size() < b.size() ? -1 : (a.size() > b.size() ? 1 : 0);
  }
  throw_render_error(std::string("'") + operator_text + "' not supported between instances of '" + left.type_name() +
                     "' and '" + right.type_name() + "'");
}

bool contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Kind::String:
      if (!item.is_string())
        throw_render_error("'in <string>' requires string as left operand, not " + item.type_name());
      return container.as_string().find(item.as_string()) != std::string::npos;
    case Kind::List:
      for (const Value& element : container.as_list().items)
        if (equals(element, item)) return true;
      return false;
    case Kind::Dict: return container.as_dict().find(item) != nullptr;
    case Kind::Undefined: return false;  // Undefined iterates as empty
    default: throw_render_error("argument of type '" + container.type_name() + "' is not iterable");
  }
}

Value arithmetic(ArithmeticOp op, const Value& left, const Value& right) {
  if (left.is_undefined()) fail_undefined(left);
  if (right.is_undefined()) fail_undefined(right);
  bool numbers = left.is_number() && right.is_number();
  bool integers = left.is_integral() && right.is_integral();
  switch (op) {
    case ArithmeticOp::Add:
      if (integers) return Value::integer(checked_int(add_overflows, left.as_int(), right.as_int()));
      if (numbers) return Value::floating(left.as_float() + right.as_float());
      if (left.is_string() && right.is_string()) return Value::string(left.as_string() + right.as_string());
      if (left.is_string())
        throw_render_error("can only concatenate str (not \"" + right.type_name() + "\") to str");
      if (left.is_list() && right.is_list() && left.as_list().kind == right.as_list().kind &&
          left.as_list().kind != SequenceKind::Iterator) {
        std::vector<Value> items = left.as_list().items;
        items.insert(items.end(), right.as_list().items.begin(), right.as_list().items.end());
        return Value::list(std::move(items), left.as_list().kind);
      }
      unsupported_operand("+", left, right);
    case ArithmeticOp::Subtract:
      if (integers) return Value::integer(checked_int(sub_overflows, left.as_int(), right.as_int()));
      if (numbers) return Value::floating(left.as_float() - right.as_float());
      unsupported_operand("-", left, right);
    case ArithmeticOp::Multiply:
      if (integers) return Value::integer(checked_int(mul_overflows, left.as_int(), right.as_int()));
      if (numbers) return Value::floating(left.as_float() * right.as_float());
      if (left.is_string() && right.is_integral()) return Value::string(repeat(left.as_string(), right.as_int()));
      if (left.is_integral() && right.is_string()) return Value::string(repeat(right.as_string(), left.as_int()));
      if (left.is_list() && right.is_integral() && left.as_list().kind != SequenceKind::Iterator)
        return Value::list(repeat(left.as_list().items, right.as_int()), left.as_list().kind);
      unsupported_operand("*", left, right);
    case ArithmeticOp::TrueDivide:
      if (!numbers) unsupported_operand("/", left, right);
      if (right.as_float() == 0.0) throw_render_error("division by zero");
      return Value::floating(left.as_float() / right.as_float());
    case ArithmeticOp::FloorDivide:
      if (!numbers) unsupported_operand("//", left, right);
      if (right.as_float() == 0.0) throw_render_error("integer division or modulo by zero");
      if (integers) {
        int64_t a = left.as_int(), b = right.as_int();
        int64_t quotient = a / b;
        if ((a % b != 0) && ((a < 0) != (b < 0))) --quotient;
        return Value::integer(quotient);
      }
      return Value::floating(std::floor(left.as_float() / right.as_float()));
    case ArithmeticOp::Modulo:
      if (left.is_string()) throw_render_error("printf-style '%' string formatting is not supported");
      if (!numbers) unsupported_operand("%", left, right);
      if (right.as_float() == 0.0) throw_render_error("integer division or modulo by zero");
      if (integers) {
        int64_t a = left.as_int(), b = right.as_int();
        int64_t remainder = a % b;
        if (remainder != 0 && ((remainder < 0) != (b < 0))) remainder += b;
        return Value::integer(remainder);
      } else {
        double b = right.as_float();
        double remainder = std::fmod(left.as_float(), b);
        if (remainder != 0 && ((remainder < 0) != (b < 0))) remainder += b;
        return Value::floating(remainder);
      }
    case ArithmeticOp::Power:
      if (!numbers) unsupported_operand("** or pow()", left, right);
      if (integers && right.as_int() >= 0) {
        int64_t base = left.as_int(), power = 1;
        for (int64_t i = 0; i < right.as_int(); ++i)
          power = checked_int(mul_overflows, power, base);
        return Value::integer(power);
      }
      return Value::floating(std::pow(left.as_float(), right.as_float()));
  }
  throw_render_error("unknown arithmetic operator");
}

Value negate(const Value& value) {
  if (value.is_undefined()) fail_undefined(value);
  if (value.is_integral()) return Value::integer(-value.as_int());
  if (value.is_float()) return Value::floating(-value.as_float());
  throw_render_error("bad operand type for unary -: '" + value.type_name() + "'");
}

Value unary_plus(const Value& value) {
  if (value.is_undefined()) fail_undefined(value);
  if (value.is_integral()) return Value::integer(value.as_int());
  if (value.is_float()) return value;
  throw_render_error("bad operand type for unary +: '" + value.type_name() + "'");
}

std::vector<Value> iterate(const Value& value) {
  switch (value.kind()) {
    case Kind::Undefined: return {};
    case Kind::List: return value.as_list().items;
    case Kind::Dict: {
      std::vector<Value> keys;
      for (const auto& entry : value.as_dict().entries) keys.push_back(entry.first);
      return keys;
    }
    case Kind::String: {
      std::vector<Value> characters;
      std::string piece;
      for (char32_t c : decode_utf8(value.as_string())) {
        piece.clear();
        append_utf8(piece, c);
        characters.push_back(Value::string(piece));
      }
      return characters;
    }
    default: throw_render_error("'" + value.type_name() + "' object is not iterable");
  }
}

int64_t length(const Value& value) {
  switch (value.kind()) {
    case Kind::Undefined: return 0;
    case Kind::String: return static_cast<int64_t>(count_code_points(value.as_string()));
    case Kind::List:
      if (value.as_list().kind == SequenceKind::Iterator) break;
      return static_cast<int64_t>(value.as_list().items.size());
    case Kind::Dict: return static_cast<int64_t>(value.as_dict().entries.size());
    case Kind::Namespace: return static_cast<int64_t>(value.as_namespace().attributes.entries.size());
    default: break;
  }
  throw_render_error("object of type '" + value.type_name() + "' has no len()");
}

Value get_attribute(const Value& object, const std::string& name) {
  switch (object.kind()) {
    case Kind::Undefined: fail_undefined(object);
    case Kind::Namespace: {
      const Value* found = object.as_namespace().attributes.find(std::string_view(name));
      return found ? *found : missing_attribute(object, name);
    }
    case Kind::Dict: {
      if (auto method = find_method(object, name)) return *method;
      const Value* found = object.as_dict().find(std::string_view(name));
      return found ? *found : missing_attribute(object, name);
    }
    default:
      if (auto method = find_method(object, name)) return *method;
      return missing_attribute(object, name);
  }
}

Value get_item(const Value& object, const Value& key) {
  switch (object.kind()) {
    case Kind::Undefined: fail_undefined(object);
    case Kind::Dict:
      if (const Value* found = object.as_dict().find(key)) return *found;
      break;
    case Kind::Namespace:
      if (key.is_string()) return get_attribute(object, key.as_string());
      break;
    case Kind::List: {
      const ListData& list = object.as_list();
      if (key.is_integral() && list.kind != SequenceKind::Iterator) {
        int64_t size = static_cast<int64_t>(list.items.size());
        int64_t index = key.as_int() < 0 ? key.as_int() + size : key.as_int();
        if (index >= 0 && index < size) return list.items[static_cast<size_t>(index)];
        return Value::undefined(object.type_name() + " index " + std::to_string(key.as_int()) + " out of range");
      }
      break;
    }
    case Kind::String:
      if (key.is_integral()) {
        std::u32string code_points = decode_utf8(object.as_string());
        int64_t size = static_cast<int64_t>(code_points.size());
        int64_t index = key.as_int() < 0 ? key.as_int() + size : key.as_int();
        if (index >= 0 && index < size) {
          std::string character;
          append_utf8(character, code_points[static_cast<size_t>(index)]);
          return Value::string(character);
        }
        return Value::undefined("string index " + std::to_string(key.as_int()) + " out of range");
      }
      break;
    default: break;
  }
  if (key.is_string()) {
    if (object.is_dict()) {
      if (auto method = find_method(object, key.as_string())) return *method;
    } else {
      return get_attribute(object, key.as_string());
    }
  }
  return missing_attribute(object, to_str(key));
}

Value slice(const Value& object, const std::optional<Value>& start, const std::optional<Value>& stop,
            const std::optional<Value>& step) {
  if (object.is_undefined()) fail_undefined(object);
  if (object.is_string()) {
    std::u32string code_points = decode_utf8(object.as_string());
    std::u32string picked;
    for (int64_t i : slice_indices(static_cast<int64_t>(code_points.size()), start, stop, step))
      picked.push_back(code_points[static_cast<size_t>(i)]);
    return Value::string(encode_utf8(picked));
  }
  if (object.is_list() && object.as_list().kind != SequenceKind::Iterator) {
    const ListData& list = object.as_list();
    std::vector<Value> picked;
    for (int64_t i : slice_indices(static_cast<int64_t>(list.items.size()), start, stop, step))
      picked.push_back(list.items[static_cast<size_t>(i)]);
    return Value::list(std::move(picked), list.kind);
  }
  return Value::undefined(std::string("'").append(object.type_name()).append("' object is not subscriptable"));
}

Value call_value(const Value& callee, const CallArgs& args) {
  if (callee.is_undefined()) fail_undefined(callee);
  if (!callee.is_callable()) throw_render_error("'" + callee.type_name() + "' object is not callable");
  return callee.as_callable().function(args);
}

void fail_undefined(const Value& undefined) {
  const std::string& hint = undefined.undefined_hint();
  throw_render_error(hint.empty() ? "use of an undefined value" : hint);
}

}  // namespace fathom::chat::jinja
