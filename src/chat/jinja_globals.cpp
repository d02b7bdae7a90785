#include "chat/jinja_globals.h"

#include <ctime>

#include "chat/jinja_operations.h"
#include "chat/template_error.h"

namespace fathom::chat::jinja {

namespace {

constexpr int64_t kMaxRange = 100000;  // Jinja's sandbox refuses larger ranges

int64_t integer_argument(const Value& value, const char* function) {
  if (!value.is_integral()) throw_render_error(std::string(function) + "() expects integers, got " + value.type_name());
  return value.as_int();
}

Value range_function(const CallArgs& args) {
  if (!args.keyword.empty()) throw_render_error("range() takes no keyword arguments");
  const auto& p = args.positional;
  if (p.empty() || p.size() > 3) throw_render_error("range expected 1 to 3 arguments, got " + std::to_string(p.size()));
  int64_t start = p.size() == 1 ? 0 : integer_argument(p[0], "range");
  int64_t stop = integer_argument(p.size() == 1 ? p[0] : p[1], "range");
  int64_t step = p.size() == 3 ? integer_argument(p[2], "range") : 1;
  if (step == 0) throw_render_error("range() arg 3 must not be zero");
  std::vector<Value> items;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
    if (static_cast<int64_t>(items.size()) >= kMaxRange) throw_render_error("Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
    items.push_back(Value::integer(i));
  }
  return Value::list(std::move(items));
}

// dict(*args, **kwargs) as Python builds it: an optional mapping or list of pairs, then keywords.
DictData dict_from_arguments(const CallArgs& args, const char* function) {
  if (args.positional.size() > 1) throw_render_error(std::string(function) + "() takes at most 1 positional argument");
  DictData dict;
  if (!args.positional.empty()) {
    const Value& source = args.positional[0];
    if (source.is_dict()) {
      dict = source.as_dict();
    } else {
      for (const Value& pair : iterate(source)) {
        std::vector<Value> parts = iterate(pair);
        if (parts.size() != 2) throw_render_error(std::string(function) + "() sequence elements must have length 2");
        dict.set(parts[0], parts[1]);
      }
    }
  }
  for (const auto& [keyword, value] : args.keyword) dict.set(Value::string(keyword), value);
  return dict;
}

Value strftime_now(const CallArgs& args) {
  BoundArgs bound("strftime_now", args, {"format"});
  const Value* format = bound.get(0);
  if (!format || !format->is_string()) throw_render_error("strftime_now() needs a format string");
  std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  std::string buffer(256, '\0');
  size_t written = std::strftime(buffer.data(), buffer.size(), format->as_string().c_str(), &local);
  if (written == 0 && !format->as_string().empty()) throw_render_error("strftime_now() format produced no output");
  buffer.resize(written);
  return Value::string(buffer);
}

}  // namespace

std::vector<std::pair<std::string, Value>> make_global_functions() {
  std::vector<std::pair<std::string, Value>> globals;
  globals.emplace_back("range", Value::callable("range", range_function));
  globals.emplace_back("dict", Value::callable("dict", [](const CallArgs& args) {
                         return Value::dict(dict_from_arguments(args, "dict"));
                       }));
  globals.emplace_back("namespace", Value::callable("namespace", [](const CallArgs& args) {
                         return Value::make_namespace(dict_from_arguments(args, "namespace"));
                       }));
  globals.emplace_back("raise_exception", Value::callable("raise_exception", [](const CallArgs& args) -> Value {
                         BoundArgs bound("raise_exception", args, {"message"});
                         throw TemplateRaisedError(bound.get(0) ? to_str(*bound.get(0)) : "", 0);
                       }));
  globals.emplace_back("strftime_now", Value::callable("strftime_now", strftime_now));
  return globals;
}

}  // namespace fathom::chat::jinja
