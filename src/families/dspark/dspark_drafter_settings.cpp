#include "dspark_drafter_settings.h"

#include <nlohmann/json.hpp>

#include "head_rank_default.h"

namespace dflash::families {

void DSparkDrafterSettings::validate(const drafter::DrafterConfig&, const std::string& where) const {
  drafter::DSparkHeads::validate(where);
}

void DSparkDrafterSettings::write(const drafter::DrafterConfig& c, nlohmann::json& j) const {
  j["markov_rank"] = markov_rank;
  j["markov_head_type"] = drafter::markov_head_type_name(markov_head_type);
  j["enable_confidence_head"] = enable_confidence_head;
  j["confidence_head_with_markov"] = confidence_head_with_markov;
  // DeepSpec's flat keys too (dflash_config, written as well, is read first by us).
  j["mask_token_id"] = c.mask_token_id;
  j["target_layer_ids"] = c.target_layer_ids;
}

bool DSparkDrafterSettings::equals(const drafter::FamilySettings& other) const {
  const auto* o = dynamic_cast<const DSparkDrafterSettings*>(&other);
  return o && static_cast<const drafter::DSparkHeads&>(*this) == *o;
}

const DSparkDrafterSettings& dspark_settings(const drafter::DrafterConfig& c) {
  return drafter::family_settings_as<DSparkDrafterSettings>(c, "DSpark");
}

std::shared_ptr<const DSparkDrafterSettings> dspark_default_settings(int64_t hidden_size) {
  drafter::DSparkHeads h;
  h.markov_rank = drafter::default_head_rank(hidden_size);
  return std::make_shared<const DSparkDrafterSettings>(h);
}

}  // namespace dflash::families
