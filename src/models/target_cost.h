// What a target costs, from its config alone (no weights): parameters, the bytes each pipeline stage holds and the
// floating-point operations of one forward over a sequence. Used by `dflash plan --node` (throughput and memory
// of a node layout) and by the check that every replica's devices can hold their stage.
#pragma once
#include <c10/core/Device.h>

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "device_layout.h"
#include "target_config.h"

namespace dflash::models {

// A target's layers by kind: attention or Gated DeltaNet, dense MLP or MoE, full or sliding-window attention
// (gpt-oss). Every per-layer figure below depends on the kind alone, so a sum over a range of layers is counts x figures: built in one pass over the layers, a range's
// counts then cost O(1), and `plan --node`'s search costs the same for 4 layers as for 65536 (issue 36).
class LayerKinds {
 public:
  explicit LayerKinds(const TargetConfig& c);
  static constexpr int kKinds = 8;
  static constexpr int index(bool linear, bool moe, bool sliding) { return 4 * int(sliding) + 2 * int(linear) + int(moe); }
  // Layers of [begin, end) of each kind, at index(DeltaNet, MoE MLP, sliding window).
  std::array<int64_t, kKinds> count(int64_t begin, int64_t end) const;

 private:
  std::vector<std::array<int64_t, kKinds>> prefix_;  // prefix_[i]: kinds of layers [0, i)
};

// Weights of decoder layer i (matrices, biases, norms; a Gated DeltaNet layer's conv, decay and norm too; every
// expert of an MoE layer).
int64_t target_layer_params(const TargetConfig& c, int64_t i);
// Every weight the loader keeps: embedding, layers, final norm, and the LM head unless tied.
int64_t target_params(const TargetConfig& c);

// The bytes of stage s of `num_stages` (layers split as split_layers does: [L s / n, L (s + 1) / n)), as the
// loader places them: the embedding on the first stage, final norm + LM head on the last (a tied head on another
// device than the embedding is a second copy). `activations` is a lower bound of what a forward of `tokens`
// tokens (one sequence) adds: the largest layer's working set (hidden states, q/k/v, the MLP's three
// [tokens, intermediate] tensors, a DeltaNet layer's [tokens, 64] chunk matrices per value head; attention as a
// fused kernel that keeps no [tokens, tokens] scores, as on a GPU) plus the outputs of the captured layers of the
// stage, kept until the forward ends.
struct StageMemory {
  double weights = 0, activations = 0;
  double total() const { return weights + activations; }
};
std::vector<StageMemory> target_stage_memory(const TargetConfig& c, int64_t dtype_bytes, int64_t num_stages,
                                             int64_t tokens, const std::vector<int64_t>& captured_layers);
// The same with the kinds already counted (what a search over stage counts uses: O(stages + captured layers)).
std::vector<StageMemory> target_stage_memory(const TargetConfig& c, const LayerKinds& kinds, int64_t dtype_bytes,
                                             int64_t num_stages, int64_t tokens,
                                             const std::vector<int64_t>& captured_layers);

// The first stage device of `layout` that cannot hold its stage (target_stage_memory for `tokens` tokens) by
// `memory_of(device)` bytes (< 0: not checked), as a one-line error naming `where` and the numbers; "" when every
// stage fits.
std::string layout_memory_problem(const TargetConfig& c, int64_t dtype_bytes, const DeviceLayout& layout,
                                  int64_t tokens, const std::vector<int64_t>& captured_layers,
                                  const std::function<double(at::Device)>& memory_of, const std::string& where);

// Floating-point operations (a multiply-add counts 2) of one forward over `seq_len` tokens of one sequence
// without a cache, by kind:
//   linear     every projection and MLP matrix (2 x tokens x in x out); of an MoE layer the router, the top_k
//              experts each token runs and the shared expert, not all experts
//   attention  causal softmax attention of the attention layers: QK^T and PV over the keys each query sees
//              (2 x D x S (S + 1) x Hq: the masked half is not computed; a sliding-window layer counts at most
//              sliding_window keys per query)
//   deltanet   the chunked gated delta rule (chunks of 64) and the short conv of Gated DeltaNet layers
//   lm_head    tokens x vocab x hidden x 2, counted only when `with_lm_head` (training features need no logits)
struct TargetFlops {
  double linear = 0, attention = 0, deltanet = 0, lm_head = 0;
  double total() const { return linear + attention + deltanet + lm_head; }
};
TargetFlops target_forward_flops(const TargetConfig& c, int64_t seq_len, bool with_lm_head);
// The same for decoder layer i alone (no LM head): what a pipeline stage of a set of layers computes.
TargetFlops target_layer_forward_flops(const TargetConfig& c, int64_t i, int64_t seq_len);
// The same summed over layers [begin, end) (a pipeline stage), in O(1) from the counted kinds.
TargetFlops target_range_forward_flops(const TargetConfig& c, const LayerKinds& kinds, int64_t begin, int64_t end,
                                       int64_t seq_len);

}  // namespace dflash::models
