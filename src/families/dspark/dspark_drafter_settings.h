// DSpark's settings as its drafters hold them (DrafterConfig::family_settings): the heads of markov_heads.h, with
// the FamilySettings hooks that read, check and write them in config.json's flat keys. Torch-free.
#pragma once
#include <cstdint>
#include <memory>

#include "family.h"
#include "markov_heads.h"

namespace dflash::families {

struct DSparkDrafterSettings final : drafter::FamilySettings, drafter::DSparkHeads {
  explicit DSparkDrafterSettings(const drafter::DSparkHeads& h) : drafter::DSparkHeads(h) {}
  void validate(const drafter::DrafterConfig& c, const std::string& where) const override;
  void write(const drafter::DrafterConfig& c, nlohmann::json& top) const override;
  bool equals(const drafter::FamilySettings& other) const override;
};

// The DSpark settings `c` holds; std::logic_error when it holds none (family.h's family_settings_as).
const DSparkDrafterSettings& dspark_settings(const drafter::DrafterConfig& c);

// DeepSpec's defaults, with the Markov rank following the hidden size (head_rank_default.h).
std::shared_ptr<const DSparkDrafterSettings> dspark_default_settings(int64_t hidden_size);

}  // namespace dflash::families
