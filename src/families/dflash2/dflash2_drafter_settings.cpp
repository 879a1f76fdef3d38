#include "dflash2_drafter_settings.h"

#include <nlohmann/json.hpp>

#include "head_rank_default.h"

namespace dflash::families {

void DFlash2DrafterSettings::validate(const drafter::DrafterConfig& c, const std::string& where) const {
  drafter::DFlash2Settings::validate(where, "dflash_config.", c.hidden_size, c.vocab_size);
}

void DFlash2DrafterSettings::write(const drafter::DrafterConfig& c, nlohmann::json& j) const {
  auto& dc = j["dflash_config"];
  dc["conv_kernel_size"] = conv_kernel_size;
  dc["conv_group_size"] = conv_group_size;
  dc["selector_rank"] = selector_rank;
  dc["selector_top_k"] = selector_top_k;
  dc["block_size"] = c.block_size;
  j["is_causal"] = false;  // without it z-lab and TorchSpec make sliding_attention layers causal
}

bool DFlash2DrafterSettings::equals(const drafter::FamilySettings& other) const {
  const auto* o = dynamic_cast<const DFlash2DrafterSettings*>(&other);
  return o && static_cast<const drafter::DFlash2Settings&>(*this) == *o;
}

const DFlash2DrafterSettings& dflash2_settings(const drafter::DrafterConfig& c) {
  return drafter::family_settings_as<DFlash2DrafterSettings>(c, "DFlash2");
}

std::shared_ptr<const DFlash2DrafterSettings> dflash2_default_settings(int64_t hidden_size) {
  drafter::DFlash2Settings s;
  s.selector_rank = drafter::default_head_rank(hidden_size);
  return std::make_shared<const DFlash2DrafterSettings>(s);
}

}  // namespace dflash::families
