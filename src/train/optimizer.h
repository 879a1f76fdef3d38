// AdamW (decoupled weight decay, bias-corrected, PyTorch's formula) on fp32 (or fp64) master weights,
// the cosine learning-rate schedule with linear warmup, and global gradient-norm clipping.
// Written over plain tensors so its whole state is two tensors per parameter plus the step count,
// which checkpoints save exactly (bit-for-bit resume).
#pragma once
#include <cstdint>
#include <vector>

#include <ATen/core/Tensor.h>

namespace dflash::train {

struct AdamWSettings {
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.0;
};

class AdamW {
 public:
  AdamW(std::vector<at::Tensor> params, AdamWSettings s);
  // One update with learning rate `lr`; grads[i] matches params[i] (same dtype/device). Increments step().
  void step(const std::vector<at::Tensor>& grads, double lr);
  int64_t steps() const { return step_; }
  void set_steps(int64_t s) { step_ = s; }
  std::vector<at::Tensor>& exp_avg() { return m_; }
  std::vector<at::Tensor>& exp_avg_sq() { return v_; }
  const std::vector<at::Tensor>& params() const { return params_; }

 private:
  std::vector<at::Tensor> params_, m_, v_;
  AdamWSettings s_;
  int64_t step_ = 0;
};

// lr at optimizer step `step` (0-based) of `total`: linear warmup over ceil(warmup_ratio * total) steps
// (step 0 gets lr / warmup), then cosine from lr down to min_ratio * lr at the last step.
double cosine_lr(int64_t step, int64_t total, double lr, double warmup_ratio, double min_ratio);

// Global L2 norm of all grads (in float64), and the factor min(1, max_norm / (norm + 1e-6)) they are scaled
// by in place (no scaling when max_norm <= 0). Returns the norm before clipping.
double clip_grad_norm(const std::vector<at::Tensor>& grads, double max_norm);

}  // namespace dflash::train
