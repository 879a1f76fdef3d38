#include "response_generator.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <chrono>
#include <stdexcept>

#include "token_sampler.h"

namespace dflash::data {

GenerationResult generate_response(const models::TargetModel& model, const std::vector<int64_t>& prompt,
                                   const GenerationOptions& opt, uint64_t stream) {
  using clock = std::chrono::steady_clock;
  if (prompt.empty()) throw std::invalid_argument("generate_response: empty prompt");
  GenerationResult r;
  if (opt.max_new <= 0) return r;
  at::NoGradGuard no_grad;
  auto rng = make_rng(opt.seed, stream);
  models::KVCache cache = model.make_cache(1, static_cast<int64_t>(prompt.size()) + opt.max_new);
  auto step = [&](const at::Tensor& ids) {
    models::TargetOutput o = model.forward(ids, &cache, {}, false, true);
    return next_token(model.lm_head(o.last_hidden.narrow(1, -1, 1)), opt.temperature, rng);
  };
  auto is_eos = [&](int64_t t) { return std::find(opt.eos_ids.begin(), opt.eos_ids.end(), t) != opt.eos_ids.end(); };
  const auto t0 = clock::now();
  int64_t tok = step(at::tensor(prompt, at::kLong).view({1, -1}));
  const auto t1 = clock::now();
  r.tokens.push_back(tok);
  while (!is_eos(tok) && static_cast<int64_t>(r.tokens.size()) < opt.max_new) {
    tok = step(at::full({1, 1}, tok, at::kLong));
    r.tokens.push_back(tok);
  }
  r.hit_eos = is_eos(tok);
  r.prefill_seconds = std::chrono::duration<double>(t1 - t0).count();
  r.decode_seconds = std::chrono::duration<double>(clock::now() - t1).count();
  return r;
}

}  // namespace dflash::data
