#include "server/json_fields.h"

#include <cmath>
#include <limits>
#include <sstream>

#include "server/api_error.h"

namespace fathom::server {

namespace {
std::string format_number(double value) {
  std::ostringstream out;
  out << value;
  return out.str();
}
}  // namespace

const char* json_type_phrase(const Json& value) {
  switch (value.type()) {
    case Json::value_t::null: return "null";
    case Json::value_t::boolean: return "a boolean";
    case Json::value_t::string: return "a string";
    case Json::value_t::array: return "an array";
    case Json::value_t::object: return "an object";
    case Json::value_t::number_float: return "a number";
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned: return "an integer";
    default: return "an unsupported value";
  }
}

JsonFields::JsonFields(const Json& object, std::string prefix) : object_(object), prefix_(std::move(prefix)) {}

const Json* JsonFields::get(const std::string& name) const {
  if (!object_.is_object()) return nullptr;
  auto it = object_.find(name);
  if (it == object_.end() || it->is_null()) return nullptr;
  return &*it;
}

void JsonFields::type_error(const std::string& name, const char* expected, const Json& actual) const {
  throw ApiError(400,
                 "Invalid type for '" + qualified(name) + "': expected " + expected + ", but got " +
                     json_type_phrase(actual) + " instead.",
                 qualified(name), "invalid_type");
}

std::optional<double> JsonFields::number(const std::string& name) const {
  const Json* value = get(name);
  if (!value) return std::nullopt;
  if (!value->is_number()) type_error(name, "a number", *value);
  double number = value->get<double>();
  if (!std::isfinite(number)) throw ApiError::invalid_value(qualified(name), "Invalid '" + qualified(name) + "': must be finite.");
  return number;
}

std::optional<int64_t> JsonFields::integer(const std::string& name) const {
  const Json* value = get(name);
  if (!value) return std::nullopt;
  if (value->is_number_unsigned()) {
    uint64_t unsigned_value = value->get<uint64_t>();
    if (unsigned_value > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      throw ApiError::invalid_value(qualified(name), "Invalid '" + qualified(name) + "': integer too large.");
    }
    return static_cast<int64_t>(unsigned_value);
  }
  if (value->is_number_integer()) return value->get<int64_t>();
  if (value->is_number_float()) {
    double number = value->get<double>();
    if (std::isfinite(number) && std::floor(number) == number && std::fabs(number) < 9.0e15) return static_cast<int64_t>(number);
  }
  type_error(name, "an integer", *value);
}

std::optional<bool> JsonFields::boolean(const std::string& name) const {
  const Json* value = get(name);
  if (!value) return std::nullopt;
  if (!value->is_boolean()) type_error(name, "a boolean", *value);
  return value->get<bool>();
}

std::optional<std::string> JsonFields::string(const std::string& name) const {
  const Json* value = get(name);
  if (!value) return std::nullopt;
  if (!value->is_string()) type_error(name, "a string", *value);
  return value->get<std::string>();
}

std::optional<std::vector<std::string>> JsonFields::string_or_strings(const std::string& name) const {
  const Json* value = get(name);
  if (!value) return std::nullopt;
  if (value->is_string()) return std::vector<std::string>{value->get<std::string>()};
  if (!value->is_array()) type_error(name, "a string or an array of strings", *value);
  std::vector<std::string> strings;
  for (const Json& item : *value) {
    if (!item.is_string()) type_error(name, "a string or an array of strings", item);
    strings.push_back(item.get<std::string>());
  }
  return strings;
}

std::optional<std::vector<int32_t>> JsonFields::int32_list(const std::string& name) const {
  const Json* value = get(name);
  if (!value) return std::nullopt;
  if (!value->is_array()) type_error(name, "an array of integers", *value);
  std::vector<int32_t> ids;
  ids.reserve(value->size());
  for (const Json& item : *value) {
    if (!item.is_number_integer()) type_error(name, "an array of integers", item);
    int64_t id = item.get<int64_t>();
    if (id < std::numeric_limits<int32_t>::min() || id > std::numeric_limits<int32_t>::max()) {
      throw ApiError::invalid_value(qualified(name), "Invalid '" + qualified(name) + "': " + std::to_string(id) + " is out of range.");
    }
    ids.push_back(static_cast<int32_t>(id));
  }
  return ids;
}

const Json* JsonFields::object(const std::string& name) const {
  const Json* value = get(name);
  if (value && !value->is_object()) type_error(name, "an object", *value);
  return value;
}

const Json* JsonFields::array(const std::string& name) const {
  const Json* value = get(name);
  if (value && !value->is_array()) type_error(name, "an array", *value);
  return value;
}

void JsonFields::require_range(const std::string& name, double value, double min_value, double max_value) const {
  if (value < min_value || value > max_value) {
    throw ApiError::invalid_value(qualified(name), "Invalid '" + qualified(name) + "': " + format_number(value) +
                                                       " is not within [" + format_number(min_value) + ", " +
                                                       format_number(max_value) + "].");
  }
}

void JsonFields::require_at_least(const std::string& name, int64_t value, int64_t min_value) const {
  if (value < min_value) {
    throw ApiError::invalid_value(qualified(name), "Invalid '" + qualified(name) + "': expected a value >= " +
                                                       std::to_string(min_value) + ", but got " + std::to_string(value) +
                                                       " instead.");
  }
}

void JsonFields::reject_unknown(const std::set<std::string>& known) const {
  if (!object_.is_object()) return;
  for (auto it = object_.begin(); it != object_.end(); ++it) {
    if (!known.count(it.key())) {
      throw ApiError(400, "Unknown parameter: '" + qualified(it.key()) + "'.", qualified(it.key()), "unknown_parameter");
    }
  }
}

}  // namespace fathom::server
