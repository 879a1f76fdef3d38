// dflash::chunked_lm_loss from C++: against a dense computation (value, gradient, any chunk size, soft
// labels), the fused CPU cross-entropy kernel against the generic path, and argument errors.
#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>
#include <string>

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include "chunked_lm_loss_op.h"

using dflash::ops::chunked_lm_loss;
using dflash::ops::ChunkedLossOptions;

TEST(ChunkedLoss, MatchesDenseLossAndGradientForAnyChunkSize) {
  at::manual_seed(0);
  const int64_t R = 23, H = 8, V = 37, M = 30;
  const auto opts = at::TensorOptions().dtype(at::kDouble);
  const at::Tensor lm_head = at::randn({V, H}, opts);
  const at::Tensor labels = at::randint(0, V, {R}, at::kLong);
  at::Tensor w = at::rand({R}, opts);
  w.narrow(0, 3, 4).zero_();
  const at::Tensor teacher = at::randn({M, H}, opts);
  const at::Tensor tidx = at::randint(0, M, {R}, at::kLong);
  for (double kl : {0.0, 0.15}) {
    const at::Tensor h0 = at::randn({R, H}, opts);
    // dense reference with autograd
    const at::Tensor hd = h0.clone().requires_grad_(true);
    const at::Tensor logp = at::log_softmax(at::matmul(hd, lm_head.t()), -1);
    const at::Tensor ce = -logp.gather(1, labels.unsqueeze(1)).squeeze(1);
    const at::Tensor logq = at::log_softmax(at::matmul(teacher.index_select(0, tidx), lm_head.t()), -1);
    const at::Tensor klr = (logq.exp() * (logq - logp)).sum(-1);
    const at::Tensor dense = ((ce * (1 - kl) + klr * kl) * w).sum() / w.sum();
    dense.backward();
    for (int64_t chunk : {1, 4, 100}) {
      const at::Tensor h = h0.clone().requires_grad_(true);
      auto [loss, row_ce, correct] = chunked_lm_loss(h, lm_head, labels, w, teacher, tidx, {chunk, kl});
      loss.backward();
      EXPECT_NEAR(loss.item<double>(), dense.item<double>(), 1e-12) << "chunk " << chunk << " kl " << kl;
      EXPECT_LT((h.grad() - hd.grad()).abs().max().item<double>(), 1e-12);
      EXPECT_EQ(h.grad()[4].abs().max().item<double>(), 0.0) << "rows with weight 0 get no gradient";
      EXPECT_NEAR(row_ce[0].item<double>(), ce[0].item<double>(), 1e-12);
      EXPECT_EQ(correct[0].item<bool>(), logp[0].argmax().item<int64_t>() == labels[0].item<int64_t>());
    }
    // The gradient is computed in the forward: it must still scale with the incoming gradient,
    // and a call without autograd (evaluation) must give the same loss.
    const at::Tensor h = h0.clone().requires_grad_(true);
    auto scaled = std::get<0>(chunked_lm_loss(h, lm_head, labels, w, teacher, tidx, {4, kl}));
    (scaled * -2.5).backward();
    EXPECT_LT((h.grad() + 2.5 * hd.grad()).abs().max().item<double>(), 1e-12);
    c10::NoGradGuard no_grad;
    const auto plain = std::get<0>(chunked_lm_loss(h0, lm_head, labels, w, teacher, tidx, {4, kl}));
    EXPECT_NEAR(plain.item<double>(), dense.item<double>(), 1e-12);
  }
}

// The fused CPU cross-entropy kernel (hard labels, float32 and bf16) against the generic ATen path on the
// same inputs: loss, per-row CE, argmax hits and the gradient. A vocabulary that is not a multiple of the
// vector width, ties in the argmax (the first wins), rows with weight 0 and several chunks.
TEST(ChunkedLoss, FusedKernelMatchesGenericPath) {
  at::manual_seed(5);
  const int64_t R = 29, H = 24, V = 1003;
  for (auto dt : {at::kFloat, at::kBFloat16}) {
    const auto opts = at::TensorOptions().dtype(dt);
    const at::Tensor lm_head = at::randn({V, H}, opts);
    at::Tensor labels = at::randint(0, V, {R}, at::kLong);
    at::Tensor w = at::rand({R}, opts.dtype(at::kFloat));
    w.narrow(0, 5, 3).zero_();
    at::Tensor h0 = at::randn({R, H}, opts);
    h0[1].zero_();  // all logits equal: argmax is index 0
    labels[1] = 0;
    labels[2] = V - 1;
    struct Out {
      at::Tensor loss, ce, correct, grad;
    };
    auto run = [&](bool fused) {
      const at::Tensor h = h0.clone().requires_grad_(true);
      ChunkedLossOptions o{7, 0.0, fused};
      auto [loss, ce, correct] = chunked_lm_loss(h, lm_head, labels, w, {}, {}, o);
      (loss * 3.0).backward();
      return Out{loss.detach(), ce, correct, h.grad().to(at::kFloat)};
    };
    const Out fused = run(true), generic = run(false);
    const double tol = dt == at::kFloat ? 1e-5 : 1e-2;
    EXPECT_NEAR(fused.loss.item<double>(), generic.loss.item<double>(), tol * std::abs(generic.loss.item<double>()));
    EXPECT_LT((fused.ce - generic.ce).abs().max().item<double>(), tol * 10);
    EXPECT_TRUE(at::equal(fused.correct, generic.correct));
    EXPECT_TRUE(fused.correct[1].item<bool>());
    const double gscale = generic.grad.abs().max().item<double>();
    EXPECT_GT(gscale, 0.0);
    EXPECT_LT((fused.grad - generic.grad).abs().max().item<double>(), tol * gscale) << c10::toString(dt);
    EXPECT_EQ(fused.grad[6].abs().max().item<double>(), 0.0) << "rows with weight 0 get no gradient";
  }
}

namespace {

std::string loss_error(const at::Tensor& h, const at::Tensor& lm_head, const at::Tensor& labels, const at::Tensor& w,
                       const ChunkedLossOptions& o) {
  try {
    chunked_lm_loss(h, lm_head, labels, w, {}, {}, o);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace

TEST(ChunkedLoss, BadArgumentsAreInvalidArgumentErrors) {
  const at::Tensor h = at::randn({5, 4}), lm_head = at::randn({9, 4}), w = at::ones({5});
  const at::Tensor labels = at::zeros({5}, at::kLong);
  EXPECT_EQ(loss_error(h, at::randn({9, 3}), labels, w, {}),
            "chunked_lm_loss: hidden [R, H] and lm_head [V, H] must share H");
  EXPECT_EQ(loss_error(h, lm_head, labels.narrow(0, 0, 4), w, {}),
            "chunked_lm_loss: labels and weights need one entry per hidden row");
  EXPECT_EQ(loss_error(h, lm_head, labels.to(at::kInt), w, {}),
            "chunked_lm_loss: labels must have dtype Long (int64), got Int");
  EXPECT_EQ(loss_error(h, lm_head, labels, w, {0, 0.0, true}), "chunked_lm_loss: chunk_rows must be positive");
  EXPECT_EQ(loss_error(h, lm_head, labels, w, {4, 1.5, true}), "chunked_lm_loss: kl_weight must be a finite number in [0, 1], got 1.5");
  EXPECT_EQ(loss_error(h, lm_head, labels, w, {4, std::nan(""), true}),
            "chunked_lm_loss: kl_weight must be a finite number in [0, 1], got nan");
  EXPECT_EQ(loss_error(h, lm_head.to(at::kDouble), labels, w, {}),
            "chunked_lm_loss: hidden must be floating-point and lm_head of its dtype, got Float and Double");
  EXPECT_EQ(loss_error(h, lm_head, labels, w.to(at::kLong), {}), "chunked_lm_loss: weights must be floating-point, got Long");
  EXPECT_EQ(loss_error(h, lm_head, labels, w.to(at::kMeta), {}),
            "chunked_lm_loss: weights is on meta but hidden is on cpu; every tensor argument must be on one device");
  EXPECT_EQ(loss_error(h, lm_head, labels, w, {4, 0.2, true}),
            "chunked_lm_loss: kl_weight > 0 needs the target's last hidden states");
}
