// DFlash2's settings as its drafters hold them (DrafterConfig::family_settings): the convs' and selector's shape of
// dflash2_settings.h, with the FamilySettings hooks that check and write them in config.json's dflash_config.
// Torch-free.
#pragma once
#include <cstdint>
#include <memory>

#include "dflash2_settings.h"
#include "family.h"

namespace dflash::families {

struct DFlash2DrafterSettings final : drafter::FamilySettings, drafter::DFlash2Settings {
  explicit DFlash2DrafterSettings(const drafter::DFlash2Settings& s) : drafter::DFlash2Settings(s) {}
  void validate(const drafter::DrafterConfig& c, const std::string& where) const override;
  void write(const drafter::DrafterConfig& c, nlohmann::json& top) const override;
  bool equals(const drafter::FamilySettings& other) const override;
};

// The DFlash2 settings `c` holds; std::logic_error when it holds none (family.h's family_settings_as).
const DFlash2DrafterSettings& dflash2_settings(const drafter::DrafterConfig& c);

// The sources' defaults, with the selector rank following the hidden size (head_rank_default.h).
std::shared_ptr<const DFlash2DrafterSettings> dflash2_default_settings(int64_t hidden_size);

}  // namespace dflash::families
