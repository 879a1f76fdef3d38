#include "dflash2_proposer.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <random>
#include <stdexcept>
#include <string>

namespace dflash::eval {

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

Draft selector_path_draft(const drafter::SelectorWeights& w, const drafter::Candidates& cands, const at::Tensor& hidden,
                          int64_t anchor, int64_t vocab_size, double temperature, const std::vector<double>& uniforms) {
  if (cands.ids.dim() != 2 || hidden.dim() != 2 || hidden.size(0) != cands.ids.size(0) ||
      cands.logits.sizes() != cands.ids.sizes())
    throw std::invalid_argument("selector path: need candidates [L, K] and hidden [L, d]");
  const int64_t L = cands.ids.size(0), K = cands.ids.size(1);
  if (temperature > 0 && static_cast<int64_t>(uniforms.size()) != L)
    throw std::invalid_argument("selector path: sampling needs one uniform per drafted slot");
  Draft out;
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

DFlash2Proposer::DFlash2Proposer(const LoadedDrafter& d, const models::TargetModel& target, int64_t max_draft,
                                 ops::AttentionBackend attention)
    : DFlashProposer(d, target, max_draft, attention) {
  const std::string where = d.dir + "/config.json";
  if (std::string(d.config.family.name()) != "dflash2")
    throw std::invalid_argument(where + ": DFlash2Proposer needs a dflash2 drafter (architectures DFlash2DraftModel)");
  if (d.lm_head.defined())
    throw std::invalid_argument(where + ": field 'draft_vocab_size': expected 0 for a dflash2 drafter (its selector "
                                "codebooks are over the target vocabulary)");
  const at::Device dev = d.weights.fc.device();
  selector_ = {d.weights.selector.hidden_projection.to(dev, at::kFloat),
               d.weights.selector.predecessor_codebook.to(dev, at::kFloat),
               d.weights.selector.successor_codebook.to(dev, at::kFloat)};
}

int64_t DFlash2Proposer::drafted_slots() const {
  const int64_t B = d_.config.block_size;
  return max_draft() > 0 ? std::min(max_draft(), B - 1) : B - 1;
}

std::vector<int64_t> DFlash2Proposer::propose(int64_t last_token, int64_t pos) {
  return draft_with_uniforms(last_token, pos, 0.0, {}).tokens;
}

Draft DFlash2Proposer::draft(int64_t last_token, int64_t pos, double temperature, std::mt19937_64& rng) {
  std::vector<double> uniforms;
  if (temperature > 0) {
    std::uniform_real_distribution<double> unit(0.0, 1.0);
    for (int64_t k = 0; k < drafted_slots(); ++k) uniforms.push_back(unit(rng));
  }
  return draft_with_uniforms(last_token, pos, temperature, uniforms);
}

Draft DFlash2Proposer::draft_with_uniforms(int64_t last_token, int64_t pos, double temperature,
                                           const std::vector<double>& uniforms) {
  const int64_t n = drafted_slots();
  const at::Tensor h = block_hidden(last_token, pos)[0].narrow(0, 1, n);  // [n, d]: slots 1..n
  // U_k through the target's LM head as DFlash's proposals are (its few-row product: on CPU much faster than the
  // chunked at::linear of training's top_candidates for these n rows), then the top-K in training's order.
  const at::Tensor unary = target_.lm_head(h.unsqueeze(0).to(target_.dtype()))[0];
  const drafter::Candidates cands = unary_candidates(unary, d_.config.dflash2.selector_top_k);
  return selector_path_draft(selector_, cands, h, last_token, d_.config.vocab_size, temperature, uniforms);
}

}  // namespace dflash::eval
