#include "dflash2_model_hooks.h"

#include <algorithm>
#include <stdexcept>
#include <utility>

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include "dflash2_drafter_settings.h"
#include "dflash2_drafting.h"
#include "dflash2_init.h"
#include "dflash2_layer.h"
#include "dflash2_objective.h"
#include "dflash2_training.h"
#include "dflash2_weight_names.h"
#include "family_model.h"
#include "safetensors.h"

namespace dflash::families {
namespace {

using namespace drafter;

class DFlash2Model final : public FamilyModel {
 public:
  const drafter::FamilyTraining* training() const override { return &dflash2_training(); }  // dflash2_training.cpp
  const drafter::FamilyDrafting* drafting() const override { return &dflash2_drafting(); }  // dflash2_drafting.cpp

  void add_weight_shapes(const DrafterConfig& c, WeightShapes& out) const override {
    const auto& x = dflash2_settings(c);
    for (auto& e : dflash2_extra_weight_shapes({c.num_hidden_layers, c.hidden_size, c.vocab_size,
                                                x.conv_kernel_size, x.conv_group_size, x.selector_rank}))
      out.push_back(std::move(e));
  }

  size_t take_weights(const DrafterConfig& c, const std::vector<at::Tensor>& made, size_t k,
                      DrafterWeights& w) const override {
    w.convs.resize(size_t(c.num_hidden_layers));
    for (auto& cv : w.convs)
      for (BlockConvWeights* b : {&cv.attention_conv, &cv.mlp_conv}) {
        b->base_kernel = made[k++];
        b->kernel_projection = made[k++];
      }
    w.selector.hidden_projection = made[k++];
    w.selector.predecessor_codebook = made[k++];
    w.selector.successor_codebook = made[k++];
    return k;
  }

  // The modules were drawn after the backbone (so the backbone is DFlash's with this seed); the convs start as the
  // exact identity and the selector as a no-op (successor codebook 0: S = U), as SpecForge starts them.
  void finish_init(const DrafterConfig& c, DrafterWeights& w, at::ScalarType dtype) const override {
    const auto& x = dflash2_settings(c);
    for (auto& cv : w.convs) {
      cv.attention_conv = identity_block_conv(c.hidden_size, x.conv_kernel_size, x.conv_group_size, dtype);
      cv.mlp_conv = identity_block_conv(c.hidden_size, x.conv_kernel_size, x.conv_group_size, dtype);
    }
    w.selector.successor_codebook.zero_();
  }

  // A DFlash drafter's file (no selector in it) is taken as the backbone (dflash2_init.h).
  DrafterWeights load_starting_weights(const DrafterConfig& c, const std::string& path, at::ScalarType dtype,
                                       uint64_t seed, double std) const override {
    const auto names = io::SafetensorsFile::open(path).names();
    if (std::find(names.begin(), names.end(), kSelectorSuccessorCodebook) == names.end())
      return load_dflash_as_dflash2(c, path, dtype, seed, std);
    return load_drafter_weights(c, path, dtype);
  }

  void check_weights(const DrafterConfig& c, const DrafterWeights& w, const std::string& who) const override {
    if (int64_t(w.convs.size()) != c.num_hidden_layers)
      throw std::invalid_argument(who + ": a DFlash2 config needs the weights' convs (" +
                                  std::to_string(c.num_hidden_layers) + " layers), got " +
                                  std::to_string(w.convs.size()));
  }

  // The same sublayers wrapped in their block convs.
  at::Tensor decoder_layer(const DrafterConfig& c, const DrafterWeights& w, int64_t i, const DecoderLayerShape& s,
                           const at::Tensor& x, const LayerShared& sh, bool checkpointed) const override {
    const LayerConvWeights& cv = w.convs[size_t(i)];
    const int64_t G = dflash2_settings(c).conv_group_size;
    return checkpointed ? checkpointed_dflash2_decoder_layer(w.layers[size_t(i)], cv, s, G, x, sh)
                        : dflash2_decoder_layer(w.layers[size_t(i)], cv, s, G, x, sh);
  }

  // At inference the block is one conv block: the taps never reach the context.
  at::Tensor wrap_sublayer(const DrafterConfig& c, const DrafterWeights& w, int64_t i, Sublayer site,
                           int64_t block_size, const at::Tensor& h,
                           const std::function<at::Tensor(const at::Tensor&)>& sublayer) const override {
    const LayerConvWeights& cv = w.convs[size_t(i)];
    return conv_wrapped_sublayer(h, site == Sublayer::Attention ? cv.attention_conv : cv.mlp_conv,
                                 {dflash2_settings(c).conv_group_size, block_size}, sublayer);
  }

  // L = L_unary + alpha L_sel; alpha = 0 measures the selector without training it.
  at::Tensor objective(const DrafterConfig& c, const DrafterWeights& w, const FrozenTarget& t,
                       const at::Tensor& target_last_hidden, const AnchorSample&, const BlockBatch& blocks,
                       const DrafterLossOptions& opt, DrafterLossResult& r) const override {
    // The selector's top-K comes from the unary loss's own logits (no second LM-head pass).
    const ops::UnaryTopKOptions top{opt.dflash2.selector.top_k, opt.dflash2.selector.unary.output_multiplier,
                                    opt.dflash2.selector.unary.final_logit_softcapping};
    const ops::ChunkedLossWithTopK u = unary_objective(c, t, r.hidden, target_last_hidden, blocks, opt, top);
    r.loss = u.loss;
    DFlash2LossOptions o = opt.dflash2;
    o.chunk_rows = opt.chunk.chunk_rows;
    Candidates given;
    if (top.k > 0) {
      const auto shape = r.hidden.sizes().slice(0, 2).vec();
      given = {u.top_ids.view({shape[0], shape[1], top.k}), u.top_logits.view({shape[0], shape[1], top.k})};
    }
    if (o.selector_weight == 0.0) {  // measured only
      at::NoGradGuard no_grad;
      r.dflash2 = dflash2_selector_objective(w.selector, r.hidden, t.lm_head, blocks, c.block_size, o, given);
    } else {
      r.dflash2 = dflash2_selector_objective(w.selector, r.hidden, t.lm_head, blocks, c.block_size, o, given);
      r.loss = r.loss + o.selector_weight * r.dflash2.selector_loss.to(r.loss.scalar_type());
    }
    return u.row_correct;
  }

  bool takes_selector_options() const override { return true; }
};

}  // namespace

const FamilyModel& dflash2_model() {
  static const DFlash2Model model;
  return model;
}

}  // namespace dflash::families
