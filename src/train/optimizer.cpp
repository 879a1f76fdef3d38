#include "optimizer.h"

#include <cmath>

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

namespace dflash::train {

AdamW::AdamW(std::vector<at::Tensor> params, AdamWSettings s) : params_(std::move(params)), s_(s) {
  for (const auto& p : params_) {
    m_.push_back(at::zeros_like(p));
    v_.push_back(at::zeros_like(p));
  }
}

void AdamW::step(const std::vector<at::Tensor>& grads, double lr) {
  ++step_;
  const double bc1 = 1.0 - std::pow(s_.beta1, double(step_));
  const double bc2 = 1.0 - std::pow(s_.beta2, double(step_));
  const double step_size = lr / bc1;
  const double bc2_sqrt = std::sqrt(bc2);
  at::NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) {
    at::Tensor& p = params_[i];
    const at::Tensor g = grads[i].to(p.scalar_type());
    if (s_.weight_decay != 0) p.mul_(1.0 - lr * s_.weight_decay);
    m_[i].mul_(s_.beta1).add_(g, 1.0 - s_.beta1);
    v_[i].mul_(s_.beta2).addcmul_(g, g, 1.0 - s_.beta2);
    const at::Tensor denom = (v_[i].sqrt() / bc2_sqrt).add_(s_.eps);
    p.addcdiv_(m_[i], denom, -step_size);
  }
}

double cosine_lr(int64_t step, int64_t total, double lr, double warmup_ratio, double min_ratio) {
  const int64_t warmup = int64_t(std::ceil(warmup_ratio * double(total)));
  if (step < warmup) return lr * double(step + 1) / double(warmup);
  const int64_t decay = std::max<int64_t>(1, total - warmup - 1);
  const double t = std::min(1.0, double(step - warmup) / double(decay));
  const double min_lr = lr * min_ratio;
  return min_lr + (lr - min_lr) * 0.5 * (1.0 + std::cos(M_PI * t));
}

double clip_grad_norm(const std::vector<at::Tensor>& grads, double max_norm) {
  at::NoGradGuard no_grad;
  double sq = 0;
  for (const auto& g : grads) sq += g.to(at::kDouble).pow(2).sum().item<double>();
  const double norm = std::sqrt(sq);
  if (max_norm > 0) {
    const double f = max_norm / (norm + 1e-6);
    if (f < 1.0)
      for (const auto& g : grads) g.mul_(f);
  }
  return norm;
}

}  // namespace dflash::train
