#pragma once
// Python methods that chat templates call on values: str.split/strip/startswith/..., dict.get/items/...,
// list.index/count. Mutating methods resolve to an Undefined that raises when called (immutable sandbox).
#include <optional>
#include <string>

#include "chat/jinja_value.h"

namespace fathom::chat::jinja {

// The bound method `object.name`, or nullopt when the type has no such method.
std::optional<Value> find_method(const Value& object, const std::string& name);

}  // namespace fathom::chat::jinja
