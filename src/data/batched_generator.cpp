#include "batched_generator.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <chrono>
#include <random>
#include <stdexcept>
#include <string>

#include "token_sampler.h"

namespace dflash::data {
namespace {

struct Sequence {
  int64_t id = 0;
  models::KVCache cache;
  std::mt19937_64 rng;
  GenerationResult result;
};

}  // namespace

BatchStats generate_batched(const models::TargetModel& model, const GenerationOptions& opt, int64_t slots,
                            const NextPrompt& next, const ReplyDone& done) {
  using clock = std::chrono::steady_clock;
  if (slots < 1) throw std::invalid_argument("generate_batched: slots must be >= 1, got " + std::to_string(slots));
  at::NoGradGuard no_grad;
  BatchStats stats;
  auto is_eos = [&](int64_t t) { return std::find(opt.eos_ids.begin(), opt.eos_ids.end(), t) != opt.eos_ids.end(); };
  // Appends a token; true when the reply is complete.
  auto push = [&](Sequence& s, int64_t tok) {
    s.result.tokens.push_back(tok);
    s.result.hit_eos = is_eos(tok);
    return s.result.hit_eos || static_cast<int64_t>(s.result.tokens.size()) >= opt.max_new;
  };

  std::vector<Sequence> active;
  bool more = true;
  for (;;) {
    // Refill free slots; a reply that ends at its first token frees its slot at once.
    while (more && static_cast<int64_t>(active.size()) < slots) {
      BatchPrompt p;
      if (!(more = next(p))) break;
      if (p.tokens.empty()) throw std::invalid_argument("generate_batched: prompt " + std::to_string(p.id) + " is empty");
      ++stats.prompts;
      Sequence s;
      s.id = p.id;
      if (opt.max_new <= 0) {
        done(s.id, std::move(s.result));
        continue;
      }
      s.rng = make_rng(opt.seed, p.stream);
      const int64_t n = static_cast<int64_t>(p.tokens.size());
      s.cache = model.make_cache(1, n + opt.max_new);
      const auto t0 = clock::now();
      models::TargetOutput o = model.forward(at::tensor(p.tokens, at::kLong).view({1, -1}), &s.cache, {}, false, true);
      const int64_t tok = next_token(model.lm_head(o.last_hidden.narrow(1, -1, 1)), opt.temperature, s.rng);
      s.result.prefill_seconds = std::chrono::duration<double>(clock::now() - t0).count();
      stats.prefill_tokens += n;
      stats.prefill_seconds += s.result.prefill_seconds;
      ++stats.new_tokens;
      if (push(s, tok)) done(s.id, std::move(s.result));
      else active.push_back(std::move(s));
    }
    if (active.empty()) break;

    std::vector<int64_t> tokens;
    std::vector<models::KVCache*> caches;
    for (auto& s : active) {
      tokens.push_back(s.result.tokens.back());
      caches.push_back(&s.cache);
    }
    const auto t0 = clock::now();
    const at::Tensor logits = model.decode_batch(tokens, caches).to(at::kCPU);
    std::vector<bool> finished(active.size());
    for (size_t b = 0; b < active.size(); ++b)
      finished[b] = push(active[b], next_token(logits[static_cast<int64_t>(b)], opt.temperature, active[b].rng));
    const double dt = std::chrono::duration<double>(clock::now() - t0).count();
    ++stats.decode_steps;
    stats.decode_seconds += dt;
    stats.decode_tokens += static_cast<int64_t>(active.size());
    stats.new_tokens += static_cast<int64_t>(active.size());
    // Hand finished replies back in row order and keep the rest in order (the batch layout stays deterministic).
    std::vector<Sequence> keep;
    for (size_t b = 0; b < active.size(); ++b) {
      active[b].result.decode_seconds += dt;
      if (finished[b]) done(active[b].id, std::move(active[b].result));
      else keep.push_back(std::move(active[b]));
    }
    active = std::move(keep);
  }
  return stats;
}

}  // namespace dflash::data
