// Reading one field of a drafter config.json, for drafter_config.cpp and the families' settings (family.h): every
// refusal says "<where>: field '<name>': expected <what>, got <value as written>". Torch-free.
#pragma once
#include <cstdint>
#include <string>

#include <nlohmann/json_fwd.hpp>

namespace dflash::drafter {

[[noreturn]] void fail_field(const std::string& where, const std::string& field, const std::string& expected,
                             const std::string& got);
// A value as the message shows it; a missing one (null) as "nothing (missing)".
std::string shown_field(const nlohmann::json& v);
// An integer in int's range; absent or null: `def`, or an error when `required`.
int64_t int_field(const nlohmann::json& j, const char* field, const std::string& where, bool required, int64_t def);
// true or false; absent or null: `def`.
bool bool_field(const nlohmann::json& j, const char* field, const std::string& where, bool def);

}  // namespace dflash::drafter
