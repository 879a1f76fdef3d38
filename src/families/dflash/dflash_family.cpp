#include "dflash_family.h"

#include "dflash_engines.h"

namespace dflash::families {
namespace {

class DFlashFamily final : public drafter::Family {
 public:
  const char* name() const override { return "dflash"; }
  const char* display_name() const override { return "DFlash"; }
  const char* architecture() const override { return "DFlashDraftModel"; }
  const char* auto_model_class() const override { return "dflash.DFlashDraftModel"; }
  // --- export hooks: the serving engines (dflash_engines.cpp) ---
  std::vector<drafter::EngineRule> engine_rules() const override { return dflash_engine_rules(); }
};

}  // namespace

const drafter::Family& dflash_family() {
  static const DFlashFamily family;
  return family;
}

}  // namespace dflash::families
