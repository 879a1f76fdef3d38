// The drafter's trainable tensors under the exact key names of released DFlash drafters (docs/DFLASH.md
// "Formats"): fc.weight, hidden_norm.weight, norm.weight and layers.{i}.{self_attn,mlp,...}.weight.
#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

#include "candidate_selector.h"
#include "drafter_config.h"
#include "dynamic_block_conv.h"

namespace dflash::drafter {

enum LayerParam : int {
  kInputNorm, kQProj, kKProj, kVProj, kOProj, kQNorm, kKNorm, kPostNorm, kGateProj, kUpProj, kDownProj,
  kNumLayerParams
};
const char* layer_param_suffix(int p);  // e.g. "self_attn.q_proj.weight"

struct LayerWeights {
  std::array<at::Tensor, kNumLayerParams> t;
  const at::Tensor& operator[](int p) const { return t[size_t(p)]; }
};

struct DrafterWeights {
  at::Tensor fc, hidden_norm, norm;
  std::vector<LayerWeights> layers;
  // The family's extra heads under their checkpoint names, in drafter_weight_shapes() order after the layers
  // (DSpark: dspark_heads.h; empty otherwise).
  std::vector<std::pair<std::string, at::Tensor>> heads;
  // Family dflash2 only (empty otherwise): each layer's convs and the candidate selector, under z-lab's names
  // (dflash2_weight_names.h).
  std::vector<LayerConvWeights> convs;
  SelectorWeights selector;

  // (name, tensor) in a fixed order: fc, hidden_norm, norm, then layer by layer, then the family's: DSpark's heads,
  // or DFlash2's (layer by layer attention_conv and mlp_conv, then the selector).
  std::vector<std::pair<std::string, at::Tensor>> named() const;
  std::vector<at::Tensor> parameters() const;
  int64_t numel() const;
  void set_requires_grad(bool on);
};

// Expected shape of each named tensor for `c` (used to validate loads and to size the planner).
std::vector<std::pair<std::string, std::vector<int64_t>>> drafter_weight_shapes(const DrafterConfig& c);

// Linear weights ~ N(0, std), biases (".bias") 0; norm weights 1 + N(0, norm_jitter) (jitter > 0 makes tests see norm grads), except
// the final `norm`, which starts at final_norm (+ jitter): with the target's tied LM head, logits scale with it.
// DFlash2 (dflash2_init.h): the backbone drawn exactly as DFlash's with the same seed, identity convs, and the
// selector at SpecForge's no-op start (successor codebook 0, the others N(0, std)).
DrafterWeights init_drafter_weights(const DrafterConfig& c, at::ScalarType dtype, uint64_t seed, double std = 0.02,
                                    double norm_jitter = 0.0, double final_norm = 1.0);

// Builds weights from a lookup (name -> tensor), checking presence and shapes; `where` names the source in
// errors. Tensors are converted to `dtype`. Unknown extra names are an error too (a wrong file, not ours).
DrafterWeights drafter_weights_from(const DrafterConfig& c, const std::vector<std::string>& available,
                                    const std::function<at::Tensor(const std::string&)>& load,
                                    at::ScalarType dtype, const std::string& where);

// model.safetensors read/write (unprefixed docs/DFLASH.md names; any of bf16/fp16/fp32/fp64 on disk).
DrafterWeights load_drafter_weights(const DrafterConfig& c, const std::string& path, at::ScalarType dtype);
void save_drafter_weights(const std::string& path, const DrafterWeights& w, at::ScalarType dtype);

// The weights a run starts from (train's init_from): a drafter model.safetensors for `c`, or what c's family also
// starts from (family_model.h; DFlash2: a DFlash drafter's file, as the backbone of load_dflash_as_dflash2). `seed`
// and `std` draw what the file does not hold.
DrafterWeights load_starting_weights(const DrafterConfig& c, const std::string& path, at::ScalarType dtype,
                                     uint64_t seed, double std = 0.02);

}  // namespace dflash::drafter
