#include "chat/jinja_value.h"

#include "chat/jinja_operations.h"

namespace fathom::chat::jinja {

void throw_render_error(const std::string& message) { throw RenderError(message); }

Value Value::list(std::vector<Value> items, SequenceKind kind) {
  auto data = std::make_shared<ListData>();
  data->items = std::move(items);
  data->kind = kind;
  return Value(ListPtr(std::move(data)));
}

Value Value::make_namespace(DictData attributes) {
  auto data = std::make_shared<NamespaceData>();
  data->attributes = std::move(attributes);
  return Value(NamespacePtr(std::move(data)));
}

Value Value::callable(std::string name, NativeFunction function) {
  return Value(std::make_shared<const CallableData>(CallableData{std::move(name), std::move(function)}));
}

const void* Value::identity() const {
  switch (kind()) {
    case Kind::String: return std::get<StringPtr>(data_).get();
    case Kind::List: return std::get<ListPtr>(data_).get();
    case Kind::Dict: return std::get<DictPtr>(data_).get();
    case Kind::Namespace: return std::get<NamespacePtr>(data_).get();
    case Kind::Callable: return std::get<CallablePtr>(data_).get();
    default: return nullptr;
  }
}

std::string Value::type_name() const {
  switch (kind()) {
    case Kind::Undefined: return "Undefined";
    case Kind::None: return "NoneType";
    case Kind::Bool: return "bool";
    case Kind::Int: return "int";
    case Kind::Float: return "float";
    case Kind::String: return "str";
    case Kind::List:
      switch (as_list().kind) {
        case SequenceKind::List: return "list";
        case SequenceKind::Tuple: return "tuple";
        case SequenceKind::Iterator: return "generator";
      }
      return "list";
    case Kind::Dict: return "dict";
    case Kind::Namespace: return "Namespace";
    case Kind::Callable: return "function";
  }
  return "object";
}

const Value* DictData::find(const Value& key) const {
  if (key.is_string()) return find(std::string_view(key.as_string()));
  for (const auto& [entry_key, entry_value] : entries)
    if (equals(entry_key, key)) return &entry_value;
  return nullptr;
}

const Value* DictData::find(std::string_view key) const {
  for (const auto& [entry_key, entry_value] : entries)
    if (entry_key.is_string() && entry_key.as_string() == key) return &entry_value;
  return nullptr;
}

void DictData::set(Value key, Value value) {
  for (auto& [entry_key, entry_value] : entries) {
    if (equals(entry_key, key)) {
      entry_value = std::move(value);
      return;
    }
  }
  entries.emplace_back(std::move(key), std::move(value));
}

BoundArgs::BoundArgs(const std::string& function_name, const CallArgs& args, std::vector<std::string> names)
    : values_(names.size()), passed_(names.size(), false) {
  if (args.positional.size() > names.size())
    throw_render_error(function_name + "() takes at most " + std::to_string(names.size()) + " arguments (" +
                       std::to_string(args.positional.size()) + " given)");
  for (size_t i = 0; i < args.positional.size(); ++i) {
    values_[i] = args.positional[i];
    passed_[i] = true;
  }
  for (const auto& [keyword, value] : args.keyword) {
    size_t index = 0;
    while (index < names.size() && names[index] != keyword) ++index;
    if (index == names.size()) throw_render_error(function_name + "() got an unexpected keyword argument '" + keyword + "'");
    if (passed_[index]) throw_render_error(function_name + "() got multiple values for argument '" + keyword + "'");
    values_[index] = value;
    passed_[index] = true;
  }
}

Value BoundArgs::get_or(size_t index, Value fallback) const {
  const Value* value = get(index);
  return value ? *value : std::move(fallback);
}

}  // namespace fathom::chat::jinja
