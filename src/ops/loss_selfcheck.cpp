#include "loss_selfcheck.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <c10/util/Exception.h>
#include <torch/autograd.h>

#include "chunked_lm_loss_op.h"
#include "dspark_lm_loss_op.h"

namespace dflash::ops {
namespace {

struct LossOutputs {
  at::Tensor loss, dhidden;
};

LossOutputs run_loss(const at::Tensor& hidden_in, const at::Tensor& head, const at::Tensor& labels,
                     const at::Tensor& weights, int64_t chunk_rows, bool fused) {
  at::AutoGradMode grad(true);
  const at::Tensor hidden = hidden_in.detach().requires_grad_();
  ChunkedLossOptions opt;
  opt.chunk_rows = chunk_rows;
  opt.fused_ce = fused;
  const at::Tensor loss = std::get<0>(chunked_lm_loss(hidden, head, labels, weights, at::Tensor(), at::Tensor(), opt));
  return {loss.detach(), torch::autograd::grad({loss}, {hidden})[0]};
}

// DSpark's objective (a Markov bias, a teacher, a confidence head) through dspark_lm_loss: the loss and the
// gradients of hidden and W2.
struct DSparkOutputs {
  at::Tensor loss, dhidden, dw2;
};

DSparkOutputs run_dspark(const at::Tensor& hidden_in, const at::Tensor& head, const at::Tensor& labels,
                         const at::Tensor& weights, const at::Tensor& markov, const at::Tensor& w2_in,
                         const at::Tensor& teacher, const at::Tensor& teacher_index, const at::Tensor& conf,
                         int64_t chunk_rows, bool fused) {
  at::AutoGradMode grad(true);
  const at::Tensor hidden = hidden_in.detach().requires_grad_(), w2 = w2_in.detach().requires_grad_();
  DSparkLossOptions opt;
  opt.chunk_rows = chunk_rows;
  opt.fused = fused;
  const at::Tensor loss =
      dspark_lm_loss(hidden, head, labels, weights, markov, w2, teacher, teacher_index, conf, opt).loss;
  const auto g = torch::autograd::grad({loss}, {hidden, w2});
  return {loss.detach(), g[0], g[1]};
}

}  // namespace

std::string LossCheckSpec::describe() const {
  char buf[120];
  std::snprintf(buf, sizeof buf, "cpu %s, H %lld, V %lld, %lld rows", short_dtype_name(dtype).c_str(),
                (long long)hidden, (long long)vocab, (long long)rows);
  return buf;
}

std::string LossCheckResult::summary() const { return exception.empty() ? worst_of(tensors) : "threw: " + exception; }

int64_t loss_check_vocab(int64_t vocab) { return vocab <= 2048 ? vocab : 2048 + vocab % 64; }

LossCheckResult check_fused_cross_entropy(const LossCheckSpec& s) {
  LossCheckResult r;
  r.spec = s;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(s.seed);
  const auto f64 = at::TensorOptions().dtype(at::kDouble);
  const at::Tensor hidden = at::randn({s.rows, s.hidden}, gen, f64).to(s.dtype);
  const at::Tensor head = (at::randn({s.vocab, s.hidden}, gen, f64) / std::sqrt(double(s.hidden))).to(s.dtype);
  const at::Tensor labels = at::randint(0, s.vocab, {s.rows}, gen, at::TensorOptions().dtype(at::kLong));
  at::Tensor weights = at::rand({s.rows}, gen, f64);
  weights.narrow(0, 0, s.rows / 8).zero_();  // rows outside the loss
  const int64_t chunk = std::max<int64_t>(1, s.rows / 2);
  const LossOutputs exact = run_loss(hidden.to(at::kDouble), head.to(at::kDouble), labels, weights, chunk, false);
  const LossOutputs low = run_loss(hidden, head, labels, weights, chunk, false);
  LossOutputs fused;
  try {
    fused = run_loss(hidden, head, labels, weights, chunk, true);
  } catch (const std::exception& e) {
    r.exception = exception_first_line(e);
    return r;
  }
  r.tensors.push_back(compare_to_exact("loss", fused.loss, low.loss, exact.loss, s.dtype));
  r.tensors.push_back(compare_to_exact("dhidden", fused.dhidden, low.dhidden, exact.dhidden, s.dtype));
  // DSpark's fused objective kernel (dspark_objective_rows.h) shares the switch: checked on the same rows, with a
  // rank-8 Markov bias, teacher rows and confidence logits.
  const int64_t rank = 8;
  const at::Tensor markov = (at::randn({s.rows, rank}, gen, f64) * 0.5).to(s.dtype);
  const at::Tensor w2 = (at::randn({s.vocab, rank}, gen, f64) * 0.5).to(s.dtype);
  const at::Tensor teacher = at::randn({s.rows, s.hidden}, gen, f64).to(s.dtype);
  const at::Tensor teacher_index = at::randperm(s.rows, gen, at::TensorOptions().dtype(at::kLong));
  const at::Tensor conf = at::randn({s.rows}, gen, f64).to(s.dtype);
  auto dspark = [&](const at::Tensor& h, const at::Tensor& hd, const at::Tensor& m, const at::Tensor& w,
                    const at::Tensor& t, const at::Tensor& c, bool on) {
    return run_dspark(h, hd, labels, weights, m, w, t, teacher_index, c, chunk, on);
  };
  const auto d = [](const at::Tensor& t) { return t.to(at::kDouble); };
  const DSparkOutputs dexact = dspark(d(hidden), d(head), d(markov), d(w2), d(teacher), d(conf), false);
  const DSparkOutputs dlow = dspark(hidden, head, markov, w2, teacher, conf, false);
  DSparkOutputs dfused;
  try {
    dfused = dspark(hidden, head, markov, w2, teacher, conf, true);
  } catch (const std::exception& e) {
    r.exception = exception_first_line(e);
    return r;
  }
  r.tensors.push_back(compare_to_exact("dspark loss", dfused.loss, dlow.loss, dexact.loss, s.dtype));
  r.tensors.push_back(compare_to_exact("dspark dhidden", dfused.dhidden, dlow.dhidden, dexact.dhidden, s.dtype));
  r.tensors.push_back(compare_to_exact("dspark dW2", dfused.dw2, dlow.dw2, dexact.dw2, s.dtype));
  r.passed = true;
  for (const auto& t : r.tensors) r.passed = r.passed && t.ok();
  return r;
}

}  // namespace dflash::ops
