#include "family_training.h"

#include <stdexcept>

#include <nlohmann/json.hpp>

#include "family_model.h"
#include "family_registry.h"

namespace dflash::drafter {

BlockBatch FamilyTraining::build_blocks(const DrafterConfig& d, const at::Tensor& input_ids,
                                        const at::Tensor& loss_mask, const AnchorSample& anchors, double gamma) const {
  return build_block_batch(input_ids, loss_mask, anchors, d.block_size, d.mask_token_id, gamma);
}

const FamilyTraining& family_training(const Family& f) {
  static const FamilyTraining defaults;
  const FamilyTraining* t = model_of(f).training();  // the family's torch side (family_model.h)
  return t ? *t : defaults;
}

const FamilyTraining& family_training(FamilyRef f) { return family_training(f.get()); }

const FamilyTraining& family_training(const DrafterConfig& d) { return family_training(d.family); }

namespace {

const nlohmann::json& run_setting(const nlohmann::json& settings, const std::string& key, bool ok(const nlohmann::json&),
                                  const char* kind) {
  const auto it = settings.find(key);
  if (it == settings.end() || !ok(*it))
    throw std::logic_error("train settings: the drafter family reads '" + key + "' as " + kind +
                           ", which the run's settings " + (it == settings.end() ? "lack" : "hold as " + it->dump()));
  return *it;
}

}  // namespace

double run_setting_number(const nlohmann::json& s, const std::string& key) {
  return run_setting(s, key, [](const nlohmann::json& v) { return v.is_number(); }, "a number").get<double>();
}

int64_t run_setting_int(const nlohmann::json& s, const std::string& key) {
  return run_setting(s, key, [](const nlohmann::json& v) { return v.is_number_integer(); }, "an integer").get<int64_t>();
}

bool run_setting_bool(const nlohmann::json& s, const std::string& key) {
  return run_setting(s, key, [](const nlohmann::json& v) { return v.is_boolean(); }, "a boolean").get<bool>();
}

std::string run_setting_text(const nlohmann::json& s, const std::string& key) {
  return run_setting(s, key, [](const nlohmann::json& v) { return v.is_string(); }, "text").get<std::string>();
}

}  // namespace dflash::drafter
