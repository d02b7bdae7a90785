#pragma once
// Jinja's built-in filters used by chat templates, with transformers' `tojson` override.
#include <string>

#include "chat/jinja_value.h"

namespace fathom::chat::jinja {

bool is_known_filter(const std::string& name);
// Throws RenderError for bad arguments; unknown names are rejected at parse time via is_known_filter.
Value apply_filter(const std::string& name, const Value& input, const CallArgs& args);

// Jinja's make_attrgetter: "a.b.0" looked up part by part with getitem (integer parts as indices).
Value lookup_attribute_path(const Value& object, const Value& path);

}  // namespace fathom::chat::jinja
