#include "family_registry.h"

#include <ostream>
#include <stdexcept>

#include "family_train_settings.h"
#include "output_folder.h"

namespace dflash::drafter {
namespace {

std::vector<const Family*>& table() {
  static std::vector<const Family*> families;
  return families;
}

}  // namespace

void register_family(const Family& f) {
  for (const Family* g : table()) {
    if (g == &f) return;  // the same family again (a test main and a test both registering): nothing to add
    if (std::string(g->name()) == f.name() || std::string(g->architecture()) == f.architecture())
      throw std::logic_error(std::string("drafter family '") + f.name() + "' (architectures [\"" + f.architecture() +
                             "\"]) is registered already as '" + g->name() + "' ([\"" + g->architecture() + "\"])");
  }
  check_train_settings_fit(f);  // a train setting another family declares otherwise: refused here
  table().push_back(&f);
  for (const char* file : f.remote_code_files()) util::add_export_file(file);  // an export folder's files
}

const std::vector<const Family*>& registered_families() { return table(); }

const Family* find_family(const std::string& name) {
  for (const Family* f : table())
    if (name == f->name()) return f;
  return nullptr;
}

const Family* find_family_of_architecture(const std::string& architecture) {
  for (const Family* f : table())
    if (architecture == f->architecture()) return f;
  return nullptr;
}

std::string registered_family_names() {
  std::string s;
  const auto& t = table();
  for (size_t i = 0; i < t.size(); ++i) s += (i == 0 ? "" : i + 1 == t.size() ? " or " : ", ") + std::string(t[i]->name());
  return s.empty() ? "(no drafter family is registered)" : s;
}

const Family& family_named(const std::string& name, const std::string& what) {
  if (const Family* f = find_family(name)) return *f;
  throw std::invalid_argument(what + " must be " + registered_family_names() + ", got '" + name + "'");
}

const Family& default_family() {
  if (table().empty())
    throw std::logic_error("no drafter family is registered (register_builtin_families() was not called)");
  return *table().front();
}

const Family* find_family_of_setting(const std::string& key) {
  for (const Family* f : table()) {
    const FamilySettingKeys k = f->setting_keys();
    for (const auto* keys : {&k.top_level, &k.in_dflash_config})
      for (const std::string& s : *keys)
        if (s == key) return f;
  }
  return nullptr;
}

FamilyRef family_for_command(const std::string& command, const std::string& flag,
                             std::optional<FamilyRef> from_config, const std::string& config_where) {
  if (flag.empty()) return from_config.value_or(FamilyRef{});
  const Family& f = family_named(flag, command + ": --drafter-family");
  if (from_config && &from_config->get() != &f)
    throw std::invalid_argument(command + ": --drafter-family " + flag + " disagrees with " + config_where + " (" +
                                from_config->name() + ", by its architectures)");
  return f;
}

// family_ref.h: the registry resolves the default family, so a FamilyRef needs no family.h of its own.
const Family& FamilyRef::get() const { return f_ ? *f_ : default_family(); }
const char* FamilyRef::name() const { return get().name(); }
std::ostream& operator<<(std::ostream& os, const FamilyRef& f) { return os << f.name(); }

}  // namespace dflash::drafter
