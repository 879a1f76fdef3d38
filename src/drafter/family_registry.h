// The registered drafter families (family.h), looked up by name and by config.json architecture. Filled once at
// start-up by families_table.h's register_builtin_families() (the `dflash` main and every test binary call it) and
// by tests that register a family of their own; read-only afterwards, so lookups need no lock. Torch-free.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "family.h"
#include "family_ref.h"

namespace dflash::drafter {

// Adds `f` (which outlives the process: a function-local static). Throws std::logic_error when its name or its
// architecture is registered already, by another object.
void register_family(const Family& f);
// In registration order.
const std::vector<const Family*>& registered_families();

const Family* find_family(const std::string& name);
const Family* find_family_of_architecture(const std::string& architecture);
// The registered names as a message lists them: "dflash, dspark or dflash2".
std::string registered_family_names();
// The family `name`; otherwise std::invalid_argument "<what> must be dflash, dspark or dflash2, got '<name>'".
const Family& family_named(const std::string& name, const std::string& what);
// The default family (a DrafterConfig's when its config.json names none): the first registered, "dflash";
// std::logic_error when none is registered.
const Family& default_family();
// The family a DrafterConfig or TrainConfig holds (family_ref.h).
inline const Family& family_of(FamilyRef f) { return f.get(); }
// The registered family whose config.json settings (Family::setting_keys) include `key`; nullptr: none.
const Family* find_family_of_setting(const std::string& key);

// The family a command runs with: `flag` as given ("" = not given) over the one its drafter config names
// (`from_config`, read from `config_where`), else the default. A misspelt flag is an error ("<command>:
// --drafter-family must be dflash, dspark or dflash2, got 'x'"), as is one naming another family than the config
// ("<command>: --drafter-family dspark disagrees with <config_where> (dflash, by its architectures)").
FamilyRef family_for_command(const std::string& command, const std::string& flag,
                             std::optional<FamilyRef> from_config, const std::string& config_where);

}  // namespace dflash::drafter
