// A drafter's family as a value (DrafterConfig::family, TrainConfig::drafter_family): the registered plug-in
// (family.h), never a name or an enum. Read it through the registry: family_of(c.family) (family_registry.h) or
// c.family.name(). Default-constructed it is the default family, the registry's first ("dflash", the backbone every
// family builds on), looked up when first read: a DrafterConfig may be made before the families are registered.
// Torch-free, and free of family.h so that drafter_config.h can hold one.
#pragma once
#include <iosfwd>

namespace dflash::drafter {

class Family;  // family.h

class FamilyRef {
 public:
  FamilyRef() = default;
  FamilyRef(const Family& f) : f_(&f) {}  // NOLINT: implicit, so `c.family = family_named(...)` reads as it should
  // Never null; std::logic_error when no family is registered (register_builtin_families() was not called).
  const Family& get() const;
  const Family* operator->() const { return &get(); }
  // Family::name(): `drafter_family: NAME` / `--drafter-family NAME`.
  const char* name() const;
  friend bool operator==(const FamilyRef& a, const FamilyRef& b) { return &a.get() == &b.get(); }
  friend bool operator!=(const FamilyRef& a, const FamilyRef& b) { return !(a == b); }

 private:
  const Family* f_ = nullptr;  // nullptr: the default family
};

// Its name (test failure messages).
std::ostream& operator<<(std::ostream& os, const FamilyRef& f);

}  // namespace dflash::drafter
