#pragma once
// Recursive-descent parser from tokens to the template syntax tree, following Jinja's grammar and operator
// precedence (filters and tests bind tighter than arithmetic; `not x is y` is `not (x is y)`).
#include <string_view>

#include "chat/jinja_ast.h"

namespace fathom::chat::jinja {

// Throws fathom::Error naming line and column for syntax errors and unsupported statements.
TemplateAst parse_template(std::string_view source);

}  // namespace fathom::chat::jinja
