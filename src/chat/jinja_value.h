#pragma once
// The runtime value of the Jinja engine: Python's None/bool/int/float/str/list/tuple/dict, Jinja's namespace
// and Undefined, and callables. Containers are immutable and shared (the template sandbox forbids mutation);
// only a namespace is mutable, and it lives no longer than one render.
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace fathom::chat::jinja {

// An error without a template position; the evaluator adds line/column where it catches it.
class RenderError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
[[noreturn]] void throw_render_error(const std::string& message);

class Value;

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};
using NativeFunction = std::function<Value(const CallArgs&)>;

// Iterator stands for Python generators/iterators that filters return: always truthy, no len().
enum class SequenceKind { List, Tuple, Iterator };

struct ListData {
  std::vector<Value> items;
  SequenceKind kind = SequenceKind::List;
};

// Insertion-ordered like a Python dict; small, so lookups are linear.
struct DictData {
  std::vector<std::pair<Value, Value>> entries;
  const Value* find(const Value& key) const;
  const Value* find(std::string_view key) const;
  // Replaces the value of an existing equal key, else appends.
  void set(Value key, Value value);
};

struct NamespaceData {
  DictData attributes;
};

struct CallableData {
  std::string name;
  NativeFunction function;
};

struct UndefinedData {
  std::string hint;  // what went missing, used in the error when the value is misused
};

class Value {
 public:
  enum class Kind { Undefined, None, Bool, Int, Float, String, List, Dict, Namespace, Callable };

  Value() : data_(UndefinedData{}) {}
  static Value undefined(std::string hint) { return Value(UndefinedData{std::move(hint)}); }
  static Value none() { return Value(NoneTag{}); }
  static Value boolean(bool value) { return Value(value); }
  static Value integer(int64_t value) { return Value(value); }
  static Value floating(double value) { return Value(value); }
  static Value string(std::string value) { return Value(std::make_shared<const std::string>(std::move(value))); }
  static Value list(std::vector<Value> items, SequenceKind kind = SequenceKind::List);
  static Value dict(DictData data) { return Value(std::make_shared<const DictData>(std::move(data))); }
  static Value make_namespace(DictData attributes);
  static Value callable(std::string name, NativeFunction function);

  Kind kind() const { return static_cast<Kind>(data_.index()); }
  bool is_undefined() const { return kind() == Kind::Undefined; }
  bool is_none() const { return kind() == Kind::None; }
  bool is_bool() const { return kind() == Kind::Bool; }
  bool is_int() const { return kind() == Kind::Int; }
  bool is_float() const { return kind() == Kind::Float; }
  bool is_string() const { return kind() == Kind::String; }
  bool is_list() const { return kind() == Kind::List; }
  bool is_dict() const { return kind() == Kind::Dict; }
  bool is_namespace() const { return kind() == Kind::Namespace; }
  bool is_callable() const { return kind() == Kind::Callable; }
  // Python's numbers.Number: bool counts, as in Python.
  bool is_number() const { return is_bool() || is_int() || is_float(); }
  // Python int (bool is a subclass of int).
  bool is_integral() const { return is_bool() || is_int(); }

  bool as_bool() const { return std::get<bool>(data_); }
  int64_t as_int() const { return is_bool() ? (as_bool() ? 1 : 0) : std::get<int64_t>(data_); }
  double as_float() const { return is_float() ? std::get<double>(data_) : static_cast<double>(as_int()); }
  const std::string& as_string() const { return *std::get<StringPtr>(data_); }
  const ListData& as_list() const { return *std::get<ListPtr>(data_); }
  const DictData& as_dict() const { return *std::get<DictPtr>(data_); }
  NamespaceData& as_namespace() const { return *std::get<NamespacePtr>(data_); }
  const CallableData& as_callable() const { return *std::get<CallablePtr>(data_); }
  const std::string& undefined_hint() const { return std::get<UndefinedData>(data_).hint; }
  // Identity of the shared payload, for Python's `is` (sameas) on containers.
  const void* identity() const;

  // Python's type(x).__name__, for error messages.
  std::string type_name() const;

 private:
  struct NoneTag {};
  using StringPtr = std::shared_ptr<const std::string>;
  using ListPtr = std::shared_ptr<const ListData>;
  using DictPtr = std::shared_ptr<const DictData>;
  using NamespacePtr = std::shared_ptr<NamespaceData>;
  using CallablePtr = std::shared_ptr<const CallableData>;
  // Order matches Kind.
  using Storage = std::variant<UndefinedData, NoneTag, bool, int64_t, double, StringPtr, ListPtr, DictPtr,
                               NamespacePtr, CallablePtr>;

  template <typename T>
  explicit Value(T payload) : data_(std::move(payload)) {}

  Storage data_;
};

// Keyword-or-positional argument binding for builtins: `names` in positional order.
class BoundArgs {
 public:
  BoundArgs(const std::string& function_name, const CallArgs& args, std::vector<std::string> names);
  // Argument i (by position in `names`); nullptr when not passed.
  const Value* get(size_t index) const { return passed_[index] ? &values_[index] : nullptr; }
  Value get_or(size_t index, Value fallback) const;

 private:
  std::vector<Value> values_;
  std::vector<bool> passed_;
};

}  // namespace fathom::chat::jinja
