#pragma once
// Python/Jinja semantics of operators on Values: truthiness, str()/repr(), equality, ordering, `in`,
// arithmetic, iteration, len(), and the sandbox's attribute/item lookup.
#include <optional>
#include <string>
#include <vector>

#include "chat/jinja_value.h"

namespace fathom::chat::jinja {

bool truthy(const Value& value);
std::string to_str(const Value& value);   // Python str(); Undefined -> ""
std::string to_repr(const Value& value);  // Python repr()

bool equals(const Value& left, const Value& right);
// <0, 0, >0; throws for types Python cannot order.
int compare_order(const Value& left, const Value& right, const char* operator_text);
bool contains(const Value& container, const Value& item);

enum class ArithmeticOp { Add, Subtract, Multiply, TrueDivide, FloorDivide, Modulo, Power };
Value arithmetic(ArithmeticOp op, const Value& left, const Value& right);
Value negate(const Value& value);
Value unary_plus(const Value& value);

// Materialises iteration: list/tuple items, dict keys, string code points; Undefined -> empty.
std::vector<Value> iterate(const Value& value);
// Python len(); throws for values without a length (numbers, None, iterators).
int64_t length(const Value& value);

// environment.getattr: attribute first (methods), then item; missing -> Undefined; Undefined -> error.
Value get_attribute(const Value& object, const std::string& name);
// environment.getitem: item first, then attribute for string keys.
Value get_item(const Value& object, const Value& key);
// object[start:stop:step]; absent parts are nullopt.
Value slice(const Value& object, const std::optional<Value>& start, const std::optional<Value>& stop,
            const std::optional<Value>& step);

// Calls a callable value; Undefined and other non-callables raise.
Value call_value(const Value& callee, const CallArgs& args);

// The error message an Undefined raises when it is used for more than printing or testing.
[[noreturn]] void fail_undefined(const Value& undefined);

}  // namespace fathom::chat::jinja
