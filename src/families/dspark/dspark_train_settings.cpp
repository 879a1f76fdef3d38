#include "dspark_train_settings.h"

#include <cmath>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "dspark_family.h"
#include "family.h"
#include "number_range.h"

namespace dflash::families {
namespace {

// A float as written: 1e-09, not to_string's 0.000000 (train_config's spelling).
std::string shown(double v) { return std::isfinite(v) ? nlohmann::json(v).dump() : util::number_text(v); }

void require(bool ok, const std::string& key, const std::string& expected, const std::string& got) {
  if (!ok) throw std::invalid_argument("train config: '" + key + "' must be " + expected + ", got " + got);
}

class DSparkTrainSettings final : public drafter::FamilyTrainSettings {
 public:
  std::vector<drafter::TrainSettingField> fields() const override {
    const DSparkTrainValues d;
    drafter::TrainSettingField rank{"markov_rank", "int", d.heads.markov_rank,
                                    "dspark: rank r of the Markov head (W1, W2 are [V, r]; 0: no Markov bias)"};
    rank.follows_drafter_shape = true;  // shape_defaults: the hidden size's rank when not given
    drafter::TrainSettingField type{"markov_head_type", "str", drafter::markov_head_type_name(d.heads.markov_head_type),
                                    "dspark: vanilla | gated | rnn"};
    type.accepts = [](const std::string& s) { return drafter::markov_head_type_from_text(s).has_value(); };
    type.spellings = drafter::kMarkovHeadTypeSpellings;
    return {rank,
            type,
            {"enable_confidence_head", "bool", d.heads.enable_confidence_head,
             "dspark: train the per-slot confidence head"},
            {"confidence_head_with_markov", "bool", d.heads.confidence_head_with_markov,
             "dspark: the confidence head also reads W1[previous token]"},
            {"ce_loss_weight", "float", d.ce_loss_weight, "dspark: weight of CE against the gold next token"},
            {"l1_loss_weight", "float", d.l1_loss_weight,
             "dspark: weight of the L1 distance to the target's distribution"},
            {"confidence_loss_weight", "float", d.confidence_loss_weight, "dspark: weight of the confidence head's BCE"}};
  }

  // Ranges for every run; with a DSpark run, the weights and heads together and train's kl_weight and draft_vocab.
  void validate(const nlohmann::json& settings, bool trains) const override {
    const DSparkTrainValues v = dspark_train_values(settings);
    for (const auto& [key, w] : std::initializer_list<std::pair<const char*, double>>{
             {"ce_loss_weight", v.ce_loss_weight}, {"l1_loss_weight", v.l1_loss_weight},
             {"confidence_loss_weight", v.confidence_loss_weight}}) {
      if (const auto e = util::out_of_range(w, util::closed(0, 1e3))) require(false, key, *e, shown(w));
    }
    try {
      v.heads.validate("train config");
    } catch (const std::invalid_argument& e) {
      // "train config: field 'markov_rank': expected ..." -> the train config's own wording
      std::string m = e.what();
      const std::string from = "field '";
      if (const auto p = m.find(from); p != std::string::npos) m.replace(p, from.size(), "'");
      throw std::invalid_argument(m);
    }
    if (!trains) return;
    require(v.ce_loss_weight + v.l1_loss_weight + v.confidence_loss_weight > 0, "ce_loss_weight",
            "> 0 when l1_loss_weight and confidence_loss_weight are 0 (some loss to train on)", shown(v.ce_loss_weight));
    require(v.heads.enable_confidence_head || v.confidence_loss_weight == 0, "confidence_loss_weight",
            "0 with enable_confidence_head false (no head to train)", shown(v.confidence_loss_weight));
    const double kl_weight = settings.at("kl_weight").get<double>();
    require(kl_weight == 0, "kl_weight", "0 with drafter_family dspark (its L1 to the target replaces soft labels)",
            shown(kl_weight));
  }
};

}  // namespace

const drafter::FamilyTrainSettings& dspark_train_settings() {
  static const DSparkTrainSettings settings;
  return settings;
}

DSparkTrainValues dspark_train_values(const nlohmann::json& settings) {
  DSparkTrainValues v;
  v.heads.markov_rank = settings.at("markov_rank").get<int64_t>();
  const auto type = drafter::markov_head_type_from_text(settings.at("markov_head_type").get<std::string>());
  if (!type) throw std::logic_error("markov_head_type was not read by its spellings");
  v.heads.markov_head_type = *type;
  v.heads.enable_confidence_head = settings.at("enable_confidence_head").get<bool>();
  v.heads.confidence_head_with_markov = settings.at("confidence_head_with_markov").get<bool>();
  v.ce_loss_weight = settings.at("ce_loss_weight").get<double>();
  v.l1_loss_weight = settings.at("l1_loss_weight").get<double>();
  v.confidence_loss_weight = settings.at("confidence_loss_weight").get<double>();
  return v;
}

}  // namespace dflash::families
