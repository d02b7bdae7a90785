#pragma once
// Tree-walking renderer for a parsed template. Scoping follows Jinja: `for` iterations, macros and `with`
// get their own scope (so `set` inside a loop does not leak out; namespaces carry state across), `if` does not.
#include <string>

#include "chat/jinja_ast.h"
#include "chat/jinja_value.h"

namespace fathom::chat::jinja {

// Renders with `context` as the template variables (over the global functions). Errors carry line/column;
// raise_exception surfaces as chat::TemplateRaisedError.
std::string render_template(const TemplateAst& ast, const DictData& context);

// Rejects unknown filters and tests when a template is loaded, as Jinja does when compiling.
void check_filter_and_test_names(const TemplateAst& ast);

}  // namespace fathom::chat::jinja
