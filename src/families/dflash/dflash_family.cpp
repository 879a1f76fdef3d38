#include "dflash_family.h"

namespace dflash::families {
namespace {

class DFlashFamily final : public drafter::Family {
 public:
  const char* name() const override { return "dflash"; }
  const char* display_name() const override { return "DFlash"; }
  const char* architecture() const override { return "DFlashDraftModel"; }
  const char* auto_model_class() const override { return "dflash.DFlashDraftModel"; }
};

}  // namespace

const drafter::Family& dflash_family() {
  static const DFlashFamily family;
  return family;
}

}  // namespace dflash::families
