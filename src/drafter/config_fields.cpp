#include "config_fields.h"

#include <stdexcept>

#include <nlohmann/json.hpp>

#include "strict_json.h"

namespace dflash::drafter {

void fail_field(const std::string& where, const std::string& field, const std::string& expected,
                const std::string& got) {
  throw std::invalid_argument(where + ": field '" + field + "': expected " + expected + ", got " + got);
}

std::string shown_field(const nlohmann::json& v) { return v.is_null() ? "nothing (missing)" : io::json_shown(v); }

int64_t int_field(const nlohmann::json& j, const char* field, const std::string& where, bool required, int64_t def) {
  if (!j.contains(field) || j.at(field).is_null()) {
    if (required) fail_field(where, field, "an integer", "nothing (missing)");
    return def;
  }
  const auto& v = j.at(field);
  if (!v.is_number_integer()) fail_field(where, field, "an integer", shown_field(v));
  // Sizes and counts are narrowed to int downstream: refuse what would wrap, showing the value as written.
  const auto n = io::json_integer_in(v, -2147483648LL, 2147483647LL);
  if (!n) fail_field(where, field, "an integer in [-2147483648, 2147483647]", shown_field(v));
  return *n;
}

bool bool_field(const nlohmann::json& j, const char* field, const std::string& where, bool def) {
  if (!j.contains(field) || j.at(field).is_null()) return def;
  if (!j.at(field).is_boolean()) fail_field(where, field, "true or false", shown_field(j.at(field)));
  return j.at(field).get<bool>();
}

}  // namespace dflash::drafter
