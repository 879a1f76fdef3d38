// The torch side of a drafter family (family.h stays torch-free): what the drafter's weights, block forward and
// objective ask of a family. The base class is the plain DFlash drafter (docs/DFLASH.md), which DFlash and the
// test-only toy family use as it is; a family overrides the parts it changes, in its folder under src/families,
// and registers that object here (register_family_model) from the families' torch table
// (families/family_models_table.h), which the dflash main and every test binary call; a registry of its own, so
// that the torch-free builds of the families (the fuzz targets) link without it.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

#include <nlohmann/json_fwd.hpp>

#include "block_batch.h"
#include "decoder_layer.h"
#include "drafter_model.h"

namespace dflash::drafter {

using WeightShapes = std::vector<std::pair<std::string, std::vector<int64_t>>>;
enum class Sublayer { Attention, Mlp };

class FamilyTraining;  // family_training.h
class FamilyDrafting;  // family_drafting.h
struct ObjectiveBenchSetup;  // family_objective_bench.h

class FamilyModel {
 public:
  virtual ~FamilyModel() = default;

  // --- weights (drafter_weights.h) ---
  // Appends the family's tensors after the layers', in the order DrafterWeights::named() lists them.
  virtual void add_weight_shapes(const DrafterConfig& /*c*/, WeightShapes& /*out*/) const {}
  // Moves the family's typed tensors from made[k..] (drafter_weight_shapes() order) into `w` and returns the index
  // past them; the tensors after that go to w.heads under their names.
  virtual size_t take_weights(const DrafterConfig& /*c*/, const std::vector<at::Tensor>& /*made*/, size_t k,
                              DrafterWeights& /*w*/) const {
    return k;
  }
  // init_drafter_weights, after every tensor was drawn in drafter_weight_shapes() order: the family's own start.
  virtual void finish_init(const DrafterConfig& /*c*/, DrafterWeights& /*w*/, at::ScalarType /*dtype*/) const {}
  // train's init_from: a model.safetensors for `c` (this default), or whatever else the family starts from.
  virtual DrafterWeights load_starting_weights(const DrafterConfig& c, const std::string& path, at::ScalarType dtype,
                                               uint64_t seed, double std) const;

  // --- the block forward (drafter_hidden, eval's context cache) ---
  // Throws std::invalid_argument "<who>: ..." when `w` lacks what the family's forward reads.
  virtual void check_weights(const DrafterConfig& /*c*/, const DrafterWeights& /*w*/, const std::string& /*who*/) const {}
  // Decoder layer i of the training forward; `checkpointed`: recomputed in backward (checkpoint_policy.h).
  virtual at::Tensor decoder_layer(const DrafterConfig& c, const DrafterWeights& w, int64_t i,
                                   const DecoderLayerShape& s, const at::Tensor& x, const LayerShared& sh,
                                   bool checkpointed) const;
  // A sublayer of layer i on its normed input h [1, B, H] (one block of B tokens at inference): sublayer(h), or
  // the family's wrapping of it.
  virtual at::Tensor wrap_sublayer(const DrafterConfig& /*c*/, const DrafterWeights& /*w*/, int64_t /*i*/,
                                   Sublayer /*site*/, int64_t /*block_size*/, const at::Tensor& h,
                                   const std::function<at::Tensor(const at::Tensor&)>& sublayer) const {
    return sublayer(h);
  }

  // --- the objective (drafter_loss) ---
  // The loss of r.hidden (already set) into r.loss, with the family's own results (r.family_stats, r.dflash2,
  // r.loss_eps); returns row_correct [rows] (the row's argmax equals its label). Default: unary_objective.
  virtual at::Tensor objective(const DrafterConfig& c, const DrafterWeights& w, const FrozenTarget& t,
                               const at::Tensor& target_last_hidden, const AnchorSample& anchors,
                               const BlockBatch& blocks, const DrafterLossOptions& opt, DrafterLossResult& r) const;

  // --- training ---
  // What the training loop asks of the family (family_training.h): its objective's options, block batches and
  // metric terms; nullptr: DFlash's (FamilyTraining's defaults).
  virtual const FamilyTraining* training() const { return nullptr; }

  // --- drafter selftest ---
  // true: selftest's --selector-candidates and --selector-loss-weight apply.
  virtual bool takes_selector_options() const { return false; }
  // What the objective cannot take, refused before the forward: util::UsageError for a flag, std::invalid_argument
  // naming `batch` for a missing tensor (has_last_hidden: the batch has target_last_hidden).
  virtual void check_selftest(const DrafterLossOptions& /*opt*/, bool /*has_last_hidden*/,
                              const std::string& /*batch*/) const {}

  // --- eval: drafting one speculative cycle (family_drafting.h) ---
  // How the family turns a cycle's block into drafts; nullptr: as DFlash does (the LM head's argmax on slots
  // 1..B-1, eval's own).
  virtual const FamilyDrafting* drafting() const { return nullptr; }
  // --- bench step: the objective's own benchmark ---
  // `bench step --objective-naive 1`: the family's objective as training computes it against a naive version of it
  // on the same inputs (time, peak memory, loss and gradient differences), printed and returned as JSON, which bench
  // step writes under "<family>_objective"; null (the default, family_objective_bench.cpp): the family has none.
  virtual nlohmann::json benchmark_objective(const ObjectiveBenchSetup& s) const;
};

// The unary objective every family builds on: the chunked CE (plus kl_weight x KL to the target's soft labels,
// which needs target_last_hidden [b, S, H]) of `hidden` through t.lm_head, and its top-k when top.k > 0.
ops::ChunkedLossWithTopK unary_objective(const DrafterConfig& c, const FrozenTarget& t, const at::Tensor& hidden,
                                         const at::Tensor& target_last_hidden, const BlockBatch& blocks,
                                         const DrafterLossOptions& opt, const ops::UnaryTopKOptions& top = {});

class Family;

// Registers `m` (which outlives the process) as f's model; registering f again replaces nothing (std::logic_error
// if with another object).
void register_family_model(const Family& f, const FamilyModel& m);
// f's registered model; nullptr: none (the plain DFlash drafter).
const FamilyModel* find_family_model(const Family& f);
// The model hooks of c's family (family_registry.h): its registered model, or the plain DFlash drafter's.
// std::logic_error while no family model is registered (a binary that forgot the torch table would otherwise train
// every family as DFlash).
const FamilyModel& model_of(const DrafterConfig& c);
const FamilyModel& model_of(const Family& f);

}  // namespace dflash::drafter
