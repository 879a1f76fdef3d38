#include "dspark_cost.h"

#include <algorithm>
#include <string>

#include "dspark_drafter_settings.h"

namespace dflash::families {
namespace {

using drafter::DrafterConfig;
using drafter::StepCostShape;

// FLOPs (all B slots are trained rows, T of them):
//   lm_head  the Markov bias inside each loss chunk's logits GEMM (addmm with W2 [V, r]), its input gradient
//            g W2 and dW2 = g^T u: 3 x 2 T V r. (The teacher's logits, a third LM-head pass, are the planner's:
//            needs_last_hidden.)
//   heads    per row forward: gated 2 r (d + r), rnn 2 x 3r (2r + d), the confidence head 2 (d [+ r]); forward +
//            backward = 3 x forward.
class DSparkCost final : public drafter::FamilyCost {
 public:
  // The L1 teacher: the target's logits from its last hidden state.
  bool needs_last_hidden(const DrafterConfig&) const override { return true; }
  const char* replaces_soft_labels() const override { return "its L1 to the target"; }
  const char* teacher_label() const override { return "its L1 teacher"; }
  const char* heads_label() const override { return "Markov + confidence heads "; }
  const char* generic_loss_label() const override { return "DSpark objective passes"; }
  // The objective computes the teacher once per distinct target position of a loss chunk (dspark_lm_loss). A
  // chunk holds consecutive sorted anchors, so its B-token blocks overlap once the anchors are closer than B:
  // about T min(1, S / (N B)) = min(T, batch S) rows, which is also the most a step can have.
  double teacher_rows(const DrafterConfig& c, const StepCostShape& s) const override {
    return std::min(s.rows(c), double(s.batch) * double(s.seq_len));
  }

  drafter::FamilyMemory memory(const DrafterConfig& c, const StepCostShape& s) const override {
    drafter::FamilyMemory m;
    const double T = s.rows(c), V = double(c.vocab_size), e = double(s.dtype_bytes),
                 a = s.accumulation_bytes();
    const double Vl = double(c.draft_vocab_size > 0 ? c.draft_vocab_size : c.vocab_size);
    const double chunk = std::min<double>(double(s.loss_chunk_rows), T);
    // dW2 [V, r] in fp32 built during the loss, and per row the Markov features, their gradient and the rnn/gate
    // activations autograd keeps (about 6 x r), plus the confidence logit and its gradient.
    const DSparkDrafterSettings& h = dspark_settings(c);
    const double r = double(h.markov_rank);
    // The fused CPU kernel (fp32 / bf16): its chunk buffers in the compute dtype.
    const bool fused = s.cpu && (s.dtype_bytes == 4 || s.dtype_bytes == 2);
    // The fused chunks write dW2 in the compute dtype when there is one chunk (dspark_lm_loss_op.cpp), else in fp32.
    const bool dw2_narrow = fused && double(s.loss_chunk_rows) >= T;
    double heads = V * r * (dw2_narrow ? e : a) + 6 * T * r * e + 2 * T * a;
    // Narrower than fp32, generic passes: the op also holds W2's fp32 copy [V, r] for the whole pass.
    if (e < a && !fused) heads += V * r * a;
    m.loss_chunk_beside = heads;
    if (fused) {
      // Measured (docs/BENCHMARKS.md): the bf16 GEMM logits^T u allocates its [V, r] output in fp32 and then the
      // bf16 result, both while the chunk's logits are alive; at a large vocabulary this is the step's peak. With
      // one chunk that bf16 result is dW2 itself (counted in heads above).
      const double dw2_gemm = e == 2 ? V * r * (dw2_narrow ? a : a + e) : 0.0;
      // The fused kernel holds the logits and the teacher's in the compute dtype; the teacher's chunk is freed
      // before the backward GEMMs, so the dW2 GEMM's buffers replace it at the peak.
      m.loss_chunk_buffers = chunk * Vl * e + std::max(chunk * Vl * e, dw2_gemm);
      m.loss_chunk_buffers_how = dw2_gemm > 0 ? "logits in bf16 + the larger of the teacher's and the dW2 GEMM's "
                                                "[V, r] fp32 output and bf16 result: the fused CPU kernel)"
                                              : "2 buffers in the compute dtype: the fused CPU kernel)";
    }
    if (h.markov_rank > 0) {
      // Measured (docs/BENCHMARKS.md): the heads' [V, r] gradients arrive before any layer's backward. The
      // objective's backward scales its saved dW2 into a new tensor, then W1's embedding backward makes one dense
      // [V, r] gradient per use of W1 (the Markov features, and the confidence head's input when it takes them)
      // while W2's is held.
      const double vr = V * r * e;
      const double uses = h.enable_confidence_head && h.confidence_head_with_markov ? 2 : 1;
      m.backward_phases.push_back(
          {"backward: dspark objective", 2 * vr, "... + d(hidden) and its scaled copy + dW2 and its scaled copy"});
      m.backward_phases.push_back({"backward: markov embedding", (1 + uses) * vr,
                                   "... + W2's gradient + one [V, r] gradient of W1 per use (Markov features, "
                                   "confidence head)"});
    }
    return m;
  }

  drafter::FamilyFlops flops(const DrafterConfig& c, const StepCostShape& s) const override {
    drafter::FamilyFlops f;
    const double B = double(c.block_size), T = double(s.batch * s.num_anchors) * B;
    const double d = double(c.hidden_size), V = double(c.vocab_size);  // no draft vocabulary
    const DSparkDrafterSettings& h = dspark_settings(c);
    const double r = double(h.markov_rank);
    f.lm_head = 3 * 2 * T * V * r;
    double row = 0;
    if (h.markov_head_type == drafter::MarkovHeadType::Gated) row += 2 * r * (d + r);
    if (h.markov_head_type == drafter::MarkovHeadType::Rnn) row += 2 * 3 * r * (2 * r + d);
    if (h.enable_confidence_head) row += 2 * (d + (h.confidence_head_with_markov ? r : 0));
    f.heads = 3 * T * row;
    return f;
  }
};

}  // namespace

const drafter::FamilyCost& dspark_cost() {
  static const DSparkCost cost;
  return cost;
}

}  // namespace dflash::families
