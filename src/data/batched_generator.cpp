#include "batched_generator.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <chrono>
#include <map>
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
  std::vector<at::Tensor> features;  // captured rows so far, in position order
  bool complete = false;             // the reply is done; only its last token's features are still owed
};

// The captured layers of one step as [rows, layers x hidden] on the CPU (layer order as asked).
at::Tensor stack_features(const std::map<int, at::Tensor>& hidden, const std::vector<int>& layers,
                          at::ScalarType dtype) {
  std::vector<at::Tensor> parts;
  for (int id : layers) parts.push_back(hidden.at(id).to(at::kCPU));
  return at::cat(parts, -1).to(dtype);
}

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

  const bool capture = !opt.capture_layers.empty();
  // Hands a reply back; with capture, only once its last token's features are in.
  auto finish = [&](Sequence& s) {
    if (capture) s.result.features = at::cat(s.features, 0);
    done(s.id, std::move(s.result));
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
      models::TargetOutput o =
          model.forward(at::tensor(p.tokens, at::kLong).view({1, -1}), &s.cache, opt.capture_layers, false, true);
      if (capture) {
        std::map<int, at::Tensor> rows;
        for (auto& [id, h] : o.hidden) rows[id] = h[0];
        s.features.push_back(stack_features(rows, opt.capture_layers, opt.feature_dtype));
      }
      const int64_t tok = next_token(model.lm_head(o.last_hidden.narrow(1, -1, 1)), opt.temperature, s.rng);
      s.result.prefill_seconds = std::chrono::duration<double>(clock::now() - t0).count();
      stats.prefill_tokens += n;
      stats.prefill_seconds += s.result.prefill_seconds;
      ++stats.new_tokens;
      s.complete = push(s, tok);
      if (s.complete && !capture) done(s.id, std::move(s.result));
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
    std::map<int, at::Tensor> hidden;
    const at::Tensor logits = model.decode_batch(tokens, caches, true, opt.capture_layers, &hidden).to(at::kCPU);
    at::Tensor rows;
    if (capture) rows = stack_features(hidden, opt.capture_layers, opt.feature_dtype);
    int64_t made = 0;
    for (size_t b = 0; b < active.size(); ++b) {
      Sequence& s = active[b];
      // clone: a view would keep the whole step's rows alive for as long as this reply runs
      if (capture) s.features.push_back(rows.narrow(0, static_cast<int64_t>(b), 1).clone());
      if (s.complete) continue;  // this row only read the last token
      s.complete = push(s, next_token(logits[static_cast<int64_t>(b)], opt.temperature, s.rng));
      ++made;
    }
    const double dt = std::chrono::duration<double>(clock::now() - t0).count();
    ++stats.decode_steps;
    stats.decode_seconds += dt;
    stats.decode_tokens += made;
    stats.new_tokens += made;
    stats.feature_rows += static_cast<int64_t>(active.size()) - made;
    // Hand finished replies back in row order and keep the rest in order (the batch layout stays deterministic).
    // With capture a reply that just completed stays one more step, to read its last token.
    std::vector<Sequence> keep;
    for (size_t b = 0; b < active.size(); ++b) {
      Sequence& s = active[b];
      s.result.decode_seconds += dt;
      const bool fed_last = s.complete && static_cast<int64_t>(s.features.size()) == 1 + static_cast<int64_t>(s.result.tokens.size());
      if (s.complete && (!capture || fed_last)) finish(s);
      else keep.push_back(std::move(s));
    }
    active = std::move(keep);
  }
  return stats;
}

}  // namespace dflash::data
