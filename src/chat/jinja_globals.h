#pragma once
// Global functions a chat template can call: Jinja's range/namespace/dict and transformers' raise_exception
// and strftime_now.
#include <string>
#include <utility>
#include <vector>

#include "chat/jinja_value.h"

namespace fathom::chat::jinja {

std::vector<std::pair<std::string, Value>> make_global_functions();

}  // namespace fathom::chat::jinja
