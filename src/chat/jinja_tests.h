#pragma once
// Jinja's built-in tests (`x is defined`, `x is string`, `x is divisibleby 3`, ...).
#include <string>

#include "chat/jinja_value.h"

namespace fathom::chat::jinja {

bool is_known_test(const std::string& name);
bool apply_test(const std::string& name, const Value& input, const CallArgs& args);

}  // namespace fathom::chat::jinja
