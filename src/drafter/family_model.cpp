#include "family_model.h"

#include <map>
#include <stdexcept>
#include <string>

#include <ATen/ATen.h>

#include "family_registry.h"

namespace dflash::drafter {

DrafterWeights FamilyModel::load_starting_weights(const DrafterConfig& c, const std::string& path,
                                                  at::ScalarType dtype, uint64_t, double) const {
  return load_drafter_weights(c, path, dtype);
}

at::Tensor FamilyModel::decoder_layer(const DrafterConfig&, const DrafterWeights& w, int64_t i,
                                      const DecoderLayerShape& s, const at::Tensor& x, const LayerShared& sh,
                                      bool checkpointed) const {
  const LayerWeights& l = w.layers[size_t(i)];
  return checkpointed ? checkpointed_decoder_layer(l, s, x, sh) : drafter::decoder_layer(l, s, x, sh);
}

ops::ChunkedLossWithTopK unary_objective(const DrafterConfig& c, const FrozenTarget& t, const at::Tensor& hidden,
                                         const at::Tensor& target_last_hidden, const BlockBatch& blocks,
                                         const DrafterLossOptions& opt, const ops::UnaryTopKOptions& top) {
  const int64_t H = c.hidden_size;
  const bool soft = opt.chunk.kl_weight != 0.0;
  if (soft && !target_last_hidden.defined())
    throw std::invalid_argument("drafter_loss: kl_weight > 0 needs the target's last hidden states");
  const at::Tensor teacher = soft ? target_last_hidden.reshape({-1, H}) : at::Tensor();
  return ops::chunked_lm_loss_with_top_k(hidden.reshape({-1, H}), t.lm_head, blocks.labels, blocks.weights, teacher,
                                         blocks.teacher_index, opt.chunk, top);
}

at::Tensor FamilyModel::objective(const DrafterConfig& c, const DrafterWeights&, const FrozenTarget& t,
                                  const at::Tensor& target_last_hidden, const AnchorSample&, const BlockBatch& blocks,
                                  const DrafterLossOptions& opt, DrafterLossResult& r) const {
  const ops::ChunkedLossWithTopK u = unary_objective(c, t, r.hidden, target_last_hidden, blocks, opt);
  r.loss = u.loss;
  return u.row_correct;
}

namespace {

// Filled at start-up (before any thread runs), read-only afterwards: lookups need no lock.
std::map<const Family*, const FamilyModel*>& models() {
  static std::map<const Family*, const FamilyModel*> table;
  return table;
}

}  // namespace

void register_family_model(const Family& f, const FamilyModel& m) {
  const auto [it, added] = models().emplace(&f, &m);
  if (!added && it->second != &m)
    throw std::logic_error(std::string("drafter family '") + f.name() + "' has a model registered already");
}

const FamilyModel* find_family_model(const Family& f) {
  const auto it = models().find(&f);
  return it == models().end() ? nullptr : it->second;
}

const FamilyModel& model_of(const Family& f) {
  static const FamilyModel plain;
  if (models().empty())
    throw std::logic_error("no drafter family model is registered: call families::register_builtin_family_models() "
                           "at start (src/families/family_models_table.h)");
  const FamilyModel* m = find_family_model(f);
  return m ? *m : plain;
}

const FamilyModel& model_of(const DrafterConfig& c) { return model_of(family_of(c.family)); }

}  // namespace dflash::drafter
