#include "dflash2_drafting.h"

#include <ATen/ATen.h>

#include <stdexcept>
#include <string>

#include "dflash2_drafter_settings.h"

namespace dflash::families {

drafter::Candidates unary_candidates(const at::Tensor& unary, int64_t top_k) {
  if (unary.dim() != 2 || top_k < 1 || top_k > unary.size(1))
    throw std::invalid_argument("selector candidates: need logits [L, V] and 1 <= top_k <= V, got top_k " +
                                std::to_string(top_k));
  at::Tensor v, i;
  {
    // topk does not say which of equal logits it keeps: when none outside its set equals the last kept one the set
    // is exact and only its order is fixed (ascending id, then a stable sort by value); otherwise a full stable sort.
    auto [tv, ti] = at::topk(unary, top_k, -1, /*largest=*/true, /*sorted=*/true);
    if ((unary >= tv.narrow(-1, top_k - 1, 1)).sum(-1).eq(top_k).all().item<bool>()) {
      auto [by_id, order] = at::sort(ti, -1);
      auto [sv, rank] = at::sort(tv.gather(-1, order), /*stable=*/true, /*dim=*/-1, /*descending=*/true);
      v = sv;
      i = by_id.gather(-1, rank);
    } else {
      auto [sv, si] = at::sort(unary, /*stable=*/true, /*dim=*/-1, /*descending=*/true);
      v = sv.narrow(-1, 0, top_k);
      i = si.narrow(-1, 0, top_k);
    }
  }
  return {i, v};
}

drafter::BlockDraft selector_path_draft(const drafter::SelectorWeights& w, const drafter::Candidates& cands,
                                        const at::Tensor& hidden, int64_t anchor, int64_t vocab_size,
                                        double temperature, const std::vector<double>& uniforms) {
  if (cands.ids.dim() != 2 || hidden.dim() != 2 || hidden.size(0) != cands.ids.size(0) ||
      cands.logits.sizes() != cands.ids.sizes())
    throw std::invalid_argument("selector path: need candidates [L, K] and hidden [L, d]");
  const int64_t L = cands.ids.size(0), K = cands.ids.size(1);
  if (temperature > 0 && static_cast<int64_t>(uniforms.size()) != L)
    throw std::invalid_argument("selector path: sampling needs one uniform per drafted slot");
  drafter::BlockDraft out;
  if (L == 0) return out;
  // The walk in float64 on the codebook rows it reads (the anchor and the candidates): the draws and the q handed
  // to the rejection rule are then the same numbers, and the full [V, r] codebooks are never copied.
  const at::Device dev = w.predecessor_codebook.device();
  const at::Tensor ids = cands.ids.to(dev, at::kLong);
  const at::Tensor all = at::cat({at::full({1}, anchor, ids.options()), ids.reshape({-1})});
  const auto [rows, local] = at::_unique(all, /*sorted=*/true, /*return_inverse=*/true);
  drafter::SelectorWeights w64{w.hidden_projection.to(at::kDouble),
                               w.predecessor_codebook.index_select(0, rows).to(at::kDouble),
                               w.successor_codebook.index_select(0, rows).to(at::kDouble)};
  drafter::Candidates c64{local.narrow(0, 1, L * K).view({1, L, K}), cands.logits.to(dev, at::kDouble).view({1, L, K})};
  at::Tensor u;
  if (temperature > 0) u = at::tensor(uniforms, at::kDouble).view({1, L}).to(dev);
  const drafter::SelectorWalk walk =
      drafter::selector_walk(w64, c64, hidden.to(dev, at::kDouble).unsqueeze(0), local.narrow(0, 0, 1), temperature, u);
  const at::Tensor path = rows.index_select(0, walk.path[0]).to(at::kCPU).contiguous();
  out.tokens.assign(path.data_ptr<int64_t>(), path.data_ptr<int64_t>() + L);
  if (temperature > 0) {
    // q scattered onto the vocabulary: zero outside the slot's top-K.
    const at::Tensor dense =
        at::zeros({L, vocab_size}, walk.q.options()).scatter_(1, ids, walk.q[0]).to(at::kCPU).contiguous();
    const double* p = dense.data_ptr<double>();
    for (int64_t k = 0; k < L; ++k) out.probs.emplace_back(p + k * vocab_size, p + (k + 1) * vocab_size);
  }
  return out;
}

namespace {

using namespace drafter;

class DFlash2BlockDrafter final : public BlockDrafter {
 public:
  DFlash2BlockDrafter(const DrafterConfig& c, const DrafterWeights& w)
      : top_k_(dflash2_settings(c).selector_top_k), vocab_size_(c.vocab_size) {
    const at::Device dev = w.fc.device();
    selector_ = {w.selector.hidden_projection.to(dev, at::kFloat), w.selector.predecessor_codebook.to(dev, at::kFloat),
                 w.selector.successor_codebook.to(dev, at::kFloat)};
  }

  BlockDraft draft(const DraftBlock& b, const DraftSampling& s) const override {
    const int64_t n = b.drafts;
    // One uniform per drafted slot at T > 0, drawn before anything else of the cycle reads the stream.
    std::vector<double> uniforms;
    if (s.temperature > 0)
      for (int64_t k = 0; k < n; ++k) uniforms.push_back(s.uniform());
    const at::Tensor h = b.hidden.narrow(0, 1, n);  // [n, d]: slots 1..n
    // U_k through the target's LM head as DFlash's proposals are (its few-row product: on CPU much faster than the
    // chunked at::linear of training's top_candidates for these n rows), then the top-K in training's order.
    const at::Tensor unary = b.lm_head(h.unsqueeze(0))[0];
    const Candidates cands = unary_candidates(unary, top_k_);
    return selector_path_draft(selector_, cands, h, b.last_token, vocab_size_, s.temperature, uniforms);
  }

 private:
  SelectorWeights selector_;  // float32 on the drafter's device
  int64_t top_k_ = 0, vocab_size_ = 0;
};

class DFlash2Drafting final : public FamilyDrafting {
 public:
  void check(const DrafterConfig& c, const DraftingOptions& /*o*/, const std::string& where) const override {
    if (c.draft_vocab_size > 0)
      throw std::invalid_argument(where + ": field 'draft_vocab_size': expected 0 for a dflash2 drafter (its selector "
                                  "codebooks are over the target vocabulary)");
  }

  std::unique_ptr<BlockDrafter> make(const DrafterConfig& c, const DrafterWeights& w, const DraftingOptions& o,
                                     const std::string& where) const override {
    check(c, o, where);
    return std::make_unique<DFlash2BlockDrafter>(c, w);
  }
};

}  // namespace

const FamilyDrafting& dflash2_drafting() {
  static const DFlash2Drafting drafting;
  return drafting;
}

}  // namespace dflash::families
