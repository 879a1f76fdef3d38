#include "speculative_decoder.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <chrono>
#include <stdexcept>

#include "rejection_rule.h"
#include "token_sampler.h"

namespace dflash::eval {

constexpr int64_t kVerifyChunk = 4;  // LM-head rows computed at a time during verification

SpecResult speculative_generate(const models::TargetModel& target, Proposer& proposer,
                                const std::vector<int64_t>& prompt, const data::GenerationOptions& opt,
                                uint64_t stream, int64_t max_draft) {
  using clock = std::chrono::steady_clock;
  if (prompt.empty()) throw std::invalid_argument("speculative_generate: empty prompt");
  const int64_t block_size = proposer.block_size();
  if (block_size < 2) throw std::invalid_argument("speculative_generate: block size must be >= 2");
  // Tokens verified per cycle: the last committed one plus the drafts that are checked.
  const int64_t B = max_draft > 0 ? std::min(block_size, max_draft + 1) : block_size;
  at::NoGradGuard no_grad;
  SpecResult r;
  r.slot_reached.assign(static_cast<size_t>(block_size - 1), 0);
  r.slot_accepted.assign(static_cast<size_t>(block_size - 1), 0);
  if (opt.max_new <= 0) return r;
  const auto t0 = clock::now();
  auto rng = data::make_rng(opt.seed, stream);
  const std::vector<int> layers = proposer.target_layers();
  const int64_t P = static_cast<int64_t>(prompt.size());
  models::KVCache cache = target.make_cache(1, P + opt.max_new + block_size);
  auto is_eos = [&](int64_t t) { return std::find(opt.eos_ids.begin(), opt.eos_ids.end(), t) != opt.eos_ids.end(); };

  const at::Tensor prompt_ids = at::tensor(prompt, at::kLong).view({1, P}).to(target.input_device());
  const models::TargetOutput pre = target.forward(prompt_ids, &cache, layers, false, true);
  int64_t last = data::next_token(target.lm_head(pre.last_hidden.narrow(1, -1, 1)).to(at::kCPU), opt.temperature, rng);
  r.tokens.push_back(last);
  proposer.start(prompt, pre);

  while (!is_eos(last) && static_cast<int64_t>(r.tokens.size()) < opt.max_new) {
    const int64_t pos = P + static_cast<int64_t>(r.tokens.size()) - 1;  // position of `last`
    auto lap = clock::now();
    auto split = [&](double& into) {
      const auto now = clock::now();
      into += std::chrono::duration<double>(now - lap).count();
      lap = now;
    };
    Draft draft = proposer.draft(last, pos, opt.temperature, rng);
    split(r.draft_s);
    if (static_cast<int64_t>(draft.tokens.size()) > block_size - 1 ||
        (!draft.probs.empty() && draft.probs.size() != draft.tokens.size()))
      throw std::logic_error("proposer returned a wrong block size");
    // This cycle verifies the last token plus at most B - 1 drafts (fewer when the proposer stopped early).
    const int64_t Bc = std::min<int64_t>(B, static_cast<int64_t>(draft.tokens.size()) + 1);
    std::vector<int64_t> block(draft.tokens.begin(), draft.tokens.begin() + (Bc - 1));
    block.insert(block.begin(), last);
    const at::Tensor ids = at::tensor(block, at::kLong).view({1, Bc}).to(target.input_device());
    const models::TargetOutput ver = target.forward(ids, &cache, layers, false, true);
    split(r.verify_s);
    // Row i of the LM head predicts position pos+i+1. On CPU the LM head over all B rows can cost more than
    // the verify forward itself, so rows are computed in small chunks, only as far as drafts are accepted.
    std::vector<at::Tensor> rows(static_cast<size_t>(Bc));
    int64_t computed = 0;
    auto row = [&](int64_t i) -> const at::Tensor& {
      while (computed <= i) {
        const int64_t n = std::min<int64_t>(kVerifyChunk, Bc - computed);
        const at::Tensor l = target.lm_head(ver.last_hidden.narrow(1, computed, n)).to(at::kCPU)[0];
        for (int64_t k = 0; k < n; ++k) rows[static_cast<size_t>(computed + k)] = l[k];
        computed += n;
      }
      return rows[static_cast<size_t>(i)];
    };

    int64_t accepted = 0, next = -1;
    for (int64_t i = 0; i < Bc - 1; ++i) {
      const int64_t d = block[static_cast<size_t>(i + 1)];
      ++r.slot_reached[static_cast<size_t>(i)];
      bool ok;
      if (opt.temperature <= 0) {
        const int64_t t = row(i).argmax().item<int64_t>();
        ok = t == d;
        if (!ok) next = t;
      } else if (!draft.probs.empty()) {  // a sampled draft with its distribution q: min(1, p/q), residual
        const std::vector<double> p = data::token_probs(row(i), opt.temperature);
        const auto& q = draft.probs[static_cast<size_t>(i)];
        ok = std::uniform_real_distribution<double>(0.0, 1.0)(rng) < acceptance_probability(p, q, d);
        if (!ok) next = data::draw(residual_distribution(p, q), rng);
      } else {
        std::vector<double> p = data::token_probs(row(i), opt.temperature);
        ok = std::uniform_real_distribution<double>(0.0, 1.0)(rng) < p[static_cast<size_t>(d)];
        if (!ok) {
          p[static_cast<size_t>(d)] = 0;  // residual max(0, p - q) for a point-mass draft q
          next = data::draw(p, rng);
        }
      }
      if (!ok) break;
      ++r.slot_accepted[static_cast<size_t>(i)];
      ++accepted;
    }
    if (accepted == Bc - 1) next = data::next_token(row(Bc - 1), opt.temperature, rng);

    // Commit accepted drafts then the target's token, stopping at eos / max_new as plain decoding would.
    int64_t committed = 0;  // tokens of `block` (from index 1) that made it into the output
    bool stop = false;
    for (int64_t i = 1; i <= accepted + 1 && !stop; ++i) {
      const int64_t t = i <= accepted ? block[static_cast<size_t>(i)] : next;
      r.tokens.push_back(t);
      ++committed;
      last = t;
      stop = is_eos(t) || static_cast<int64_t>(r.tokens.size()) >= opt.max_new;
    }
    split(r.verify_head_s);
    r.accept_lengths.push_back(committed);
    // Keep the target's cache for positions 0..pos+accepted (the verified block up to the last accepted
    // draft); the new token's K/V come with the next block.
    cache.crop(pos + 1 + accepted);
    proposer.commit(ver, accepted + 1);
    split(r.commit_s);
  }
  r.seconds = std::chrono::duration<double>(clock::now() - t0).count();
  return r;
}

}  // namespace dflash::eval
