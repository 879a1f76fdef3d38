#include "dspark_objective_bench.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include "byte_size.h"
#include "dspark_drafter_settings.h"
#include "markov_heads.h"
#include "dspark_lm_loss_op.h"

namespace dflash::families {

at::Tensor naive_dspark_loss(const at::Tensor& hidden, const at::Tensor& lm_head, const at::Tensor& labels,
                             const at::Tensor& weights, const at::Tensor& markov, const at::Tensor& markov_w2,
                             const at::Tensor& teacher_hidden, const at::Tensor& teacher_index,
                             const at::Tensor& confidence, double ce_w, double l1_w, double conf_w, double den_eps) {
  // fp64 stays fp64; narrower dtypes accumulate in fp32 (as the chunked op does).
  const at::ScalarType ct = hidden.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  at::Tensor logits = at::mm(hidden, lm_head.t()).to(ct);                             // [R, V], the whole batch
  if (markov.defined()) logits = logits + at::mm(markov, markov_w2.t()).to(ct);       // the Markov bias
  const at::Tensor logp = at::log_softmax(logits, -1);
  const at::Tensor w = weights.to(ct);
  const at::Tensor ce = -logp.gather(1, labels.reshape({-1, 1})).squeeze(1);
  at::Tensor total = ce_w * (w * ce).sum();
  if (teacher_hidden.defined()) {
    const at::Tensor teacher = at::softmax(at::mm(teacher_hidden.index_select(0, teacher_index), lm_head.t()).to(ct), -1);
    const at::Tensor l1 = (at::exp(logp) - teacher).abs().sum(-1);
    total = total + l1_w * (w * l1).sum();
    if (confidence.defined()) {
      const at::Tensor target = (1 - l1.detach() / 2).clamp(0, 1);  // stop-gradient a*
      const at::Tensor c = confidence.to(ct);
      const at::Tensor bce = c.clamp_min(0) - c * target + at::log1p(at::exp(-c.abs()));  // BCE with logits
      total = total + conf_w * (w * bce).sum();
    }
  }
  return total / (w.sum() + den_eps);
}

namespace {

struct Timed {
  double mean_seconds = 0, peak_bytes = 0, loss = 0;
  std::vector<at::Tensor> grads;  // fp64 CPU, in the order of the leaves
};

}  // namespace

nlohmann::json compare_dspark_objective(const drafter::ObjectiveBenchSetup& o) {
  const std::function<int64_t()>& reset = o.reset;
  const std::function<int64_t()>& peak = o.peak;
  const drafter::DrafterConfig& c = o.drafter;
  const int64_t B = c.block_size, R = o.anchors * B, H = c.hidden_size, V = c.vocab_size, M = o.seq_len;
  const int64_t r = dspark_settings(c).markov_rank;
  const bool conf_head = dspark_settings(c).enable_confidence_head;
  const at::Device dev = o.cuda ? at::Device(at::kCUDA) : at::Device(at::kCPU);
  const auto opts = at::TensorOptions().dtype(o.dtype);
  auto gen = at::make_generator<at::CPUGeneratorImpl>(o.seed + 104729);
  // Inputs at the scales of a step: final-normed hidden states (unit variance), a target-like head (std 0.02),
  // DeepSpec's decay exp(-j/4) over a random contiguous prefix of each block.
  const at::Tensor hidden = at::randn({R, H}, gen, opts).to(dev).requires_grad_(true);
  const at::Tensor lm_head = at::randn({V, H}, gen, opts).mul_(0.02).to(dev);
  const at::Tensor labels = at::randint(0, V, {R}, gen, at::kLong).to(dev);
  const at::Tensor prefix = at::randint(1, B + 1, {o.anchors, 1}, gen, at::kLong);
  const at::Tensor slot = at::arange(B, at::kLong).reshape({1, B});
  const at::Tensor weights =
      (at::exp(slot.to(at::kDouble) / -drafter::kDSparkGamma) * slot.lt(prefix).to(at::kDouble)).reshape({-1}).to(dev, at::kFloat);
  const at::Tensor markov = r > 0 ? at::randn({R, r}, gen, opts).mul_(0.1).to(dev).requires_grad_(true) : at::Tensor();
  const at::Tensor w2 = r > 0 ? at::randn({V, r}, gen, opts).mul_(0.02).to(dev).requires_grad_(true) : at::Tensor();
  const at::Tensor teacher = at::randn({M, H}, gen, opts).to(dev);
  const at::Tensor teacher_index = at::randint(0, M, {R}, gen, at::kLong).to(dev);
  const at::Tensor conf = conf_head ? at::randn({R}, gen, opts).to(dev).requires_grad_(true) : at::Tensor();
  std::vector<at::Tensor> leaves = {hidden};
  for (const at::Tensor& t : {markov, w2, conf})
    if (t.defined()) leaves.push_back(t);

  ops::DSparkLossOptions lo;
  lo.chunk_rows = o.loss_chunk_rows;
  ops::DSparkLossOptions generic_lo = lo;
  generic_lo.fused = false;
  auto chunked = [&] {
    return ops::dspark_lm_loss(hidden, lm_head, labels, weights, markov, w2, teacher, teacher_index, conf, lo).loss;
  };
  auto generic = [&] {
    return ops::dspark_lm_loss(hidden, lm_head, labels, weights, markov, w2, teacher, teacher_index, conf, generic_lo)
        .loss;
  };
  auto naive = [&] {
    return naive_dspark_loss(hidden, lm_head, labels, weights, markov, w2, teacher, teacher_index, conf, lo.ce_weight,
                             lo.l1_weight, lo.confidence_weight, lo.den_eps);
  };
  auto run = [&](const std::function<at::Tensor()>& f) {
    Timed t;
    // One untimed step first: a variant's first call maps heap and thread buffers once, which would otherwise land
    // in its peak (and favour whichever runs later).
    for (auto& l : leaves) l.mutable_grad() = at::Tensor();
    f().backward();
    for (auto& l : leaves) l.mutable_grad() = at::Tensor();
    const int64_t base = reset();
    double total = 0;
    for (int64_t it = 0; it < o.iters; ++it) {
      for (auto& l : leaves) l.mutable_grad() = at::Tensor();
      const auto t0 = std::chrono::steady_clock::now();
      at::Tensor loss = f();
      loss.backward();
      t.loss = loss.item<double>();  // also waits for a GPU
      total += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
    t.peak_bytes = double(peak() - base);
    t.mean_seconds = total / double(o.iters);
    // A copy: for fp64 CPU leaves .to() would alias the gradient, which the next variant's first backward adds into.
    for (auto& l : leaves) t.grads.push_back(l.grad().to(at::kCPU, at::kDouble, false, /*copy=*/true));
    return t;
  };
  // The fused CPU kernel runs for float32 / bf16 on the CPU; elsewhere "chunked" and "generic" time the same code.
  const Timed a = run(chunked), g = run(generic), b = run(naive);
  auto max_diff = [](const Timed& x, const Timed& y) {
    double d = 0;
    for (size_t i = 0; i < x.grads.size(); ++i) d = std::max(d, (x.grads[i] - y.grads[i]).abs().max().item<double>());
    return std::pair{std::abs(x.loss - y.loss), d};
  };
  const auto [loss_diff, grad_diff] = max_diff(a, b);
  const auto [generic_loss_diff, generic_grad_diff] = max_diff(a, g);
  std::printf("dspark objective alone, %lld rows x %lld vocabulary, forward + backward:\n", (long long)R, (long long)V);
  std::printf("  %-8s %10.4f s %14s  loss %.8g   (chunks of %lld rows%s)\n", "chunked", a.mean_seconds,
              util::human_bytes(a.peak_bytes).c_str(), a.loss, (long long)o.loss_chunk_rows,
              o.cuda || o.dtype == at::kDouble ? "" : ", the fused CPU kernel");
  std::printf("  %-8s %10.4f s %14s  loss %.8g   (the same chunks, generic ATen passes; %.2fx the time, %.2fx the "
              "memory)\n", "generic", g.mean_seconds, util::human_bytes(g.peak_bytes).c_str(), g.loss,
              g.mean_seconds / a.mean_seconds, g.peak_bytes / std::max(1.0, a.peak_bytes));
  std::printf("  %-8s %10.4f s %14s  loss %.8g   (full [rows, V] logits; %.2fx the time, %.2fx the memory)\n", "naive",
              b.mean_seconds, util::human_bytes(b.peak_bytes).c_str(), b.loss, b.mean_seconds / a.mean_seconds,
              b.peak_bytes / std::max(1.0, a.peak_bytes));
  std::printf("  |loss difference| %.3g, max |gradient difference| %.3g (generic: %.3g, %.3g)\n", loss_diff, grad_diff,
              generic_loss_diff, generic_grad_diff);
  auto row = [](const Timed& t) {
    return nlohmann::json{{"mean_seconds", t.mean_seconds}, {"measured_peak_bytes", t.peak_bytes}, {"loss", t.loss}};
  };
  return {{"rows", R}, {"vocab", V}, {"chunk_rows", o.loss_chunk_rows}, {"chunked", row(a)}, {"generic", row(g)},
          {"naive", row(b)}, {"loss_abs_diff", loss_diff}, {"grad_max_abs_diff", grad_diff},
          {"generic_loss_abs_diff", generic_loss_diff}, {"generic_grad_max_abs_diff", generic_grad_diff}};
}

}  // namespace dflash::families
