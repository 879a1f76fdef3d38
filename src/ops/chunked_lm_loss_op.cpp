// Schema, autograd and the C++ entry point of dflash::chunked_lm_loss. Device-generic (ATen calls), with
// the fused CPU cross-entropy kernel (src/kernels/cross_entropy_rows.h) for hard labels on the CPU.
#include "chunked_lm_loss_op.h"

#include <algorithm>
#include <initializer_list>
#include <stdexcept>
#include <utility>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include "cross_entropy_rows.h"
#include "fault_injection.h"
#include "row_top_k.h"

namespace dflash::ops {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

at::ScalarType acc_of(const at::Tensor& t) { return t.scalar_type() == at::kDouble ? at::kDouble : at::kFloat; }

// Logits of the given rows in the accumulation dtype: [r, V]. The only rows x V buffers of the loss are
// this one, the teacher's and one logsumexp temporary (memory_planner.cpp counts three).
at::Tensor chunk_logits(const at::Tensor& rows_hidden, const at::Tensor& lm_head, at::ScalarType acc) {
  return at::linear(rows_hidden, lm_head).to(acc);
}

// d(loss)/d(logits) of one chunk, written over `logits` in place: softmax - (1-kl) onehot(label) - kl q,
// times w_row / sum(w). `lse` is the chunk's logsumexp [r]; `q` the teacher's softmax (undefined without
// soft labels).
void logits_to_grad_(at::Tensor& logits, const at::Tensor& lse, const at::Tensor& q, const at::Tensor& lab,
                     const at::Tensor& row_scale, double kl_weight) {
  logits.sub_(lse.unsqueeze(1)).exp_();  // softmax in place
  if (q.defined()) logits.sub_(q, kl_weight);
  logits.scatter_add_(1, lab.unsqueeze(1), at::full({lab.size(0), 1}, -(1.0 - kl_weight), logits.options()));
  logits.mul_(row_scale.unsqueeze(1));
}

// The top-K of the unary logits of a chunk's rows (DFlash2's selector candidates), taken before the logits are
// overwritten by their gradient. `dtype` is the hidden's: the unary transform rounds as the selector's own pass did.
void keep_top_k(const at::Tensor& logits, at::ScalarType dtype, const UnaryTopKOptions& top, const at::Tensor& idx,
                at::Tensor& top_ids, at::Tensor& top_logits) {
  if (top.k == 0) return;
  auto [v, i] = row_top_k(unary_logits(logits.to(dtype), top.output_multiplier, top.final_logit_softcapping), top.k);
  top_ids.index_copy_(0, idx, i);
  top_logits.index_copy_(0, idx, v);
}

// One chunk of hard-label rows through the fused kernel: logits stay in the hidden dtype (the GEMM's own
// output), the kernel writes ce/lse/correct per row and, when wsum > 0, the gradient over the logits, which
// the backward GEMM then reads directly.
void fused_chunk(const at::Tensor& rows_hidden, const at::Tensor& lm_head, const at::Tensor& lab,
                 const at::Tensor& wrow, double wsum, const at::Tensor& idx, at::Tensor& total, at::Tensor& row_ce,
                 at::Tensor& row_correct, at::Tensor& dhidden, const UnaryTopKOptions& top, at::Tensor& top_ids,
                 at::Tensor& top_logits) {
  at::Tensor logits = at::linear(rows_hidden, lm_head).contiguous();
  keep_top_k(logits, logits.scalar_type(), top, idx, top_ids, top_logits);
  const int64_t r = logits.size(0);
  const at::Tensor lab_c = lab.contiguous();
  const at::Tensor scale = wsum > 0 ? (wrow / wsum).to(at::kFloat).contiguous() : at::Tensor();
  at::Tensor lse = at::empty({r}, logits.options().dtype(at::kFloat));
  at::Tensor ce = at::empty({r}, lse.options());
  at::Tensor correct = at::empty({r}, lse.options().dtype(at::kByte));
  kernels::CrossEntropyRowsArgs a;
  a.dtype = logits.scalar_type() == at::kBFloat16 ? kernels::ScalarType::BFloat16 : kernels::ScalarType::Float32;
  a.rows = r, a.vocab = logits.size(1), a.ld = logits.stride(0);
  a.logits = logits.data_ptr();
  a.labels = lab_c.data_ptr<int64_t>();
  a.scale = scale.defined() ? scale.data_ptr<float>() : nullptr;
  a.write_grad = scale.defined();
  a.lse = lse.data_ptr<float>(), a.ce = ce.data_ptr<float>(), a.correct = correct.data_ptr<uint8_t>();
  if (const std::string err = kernels::check_cross_entropy_rows(a); !err.empty()) throw std::invalid_argument(err);
  at::parallel_for(0, r, 8, [&](int64_t r0, int64_t r1) { kernels::cross_entropy_rows_cpu(a, r0, r1); });
  inject_cross_entropy_fault({ce, a.write_grad ? logits : at::Tensor()});  // test-only, off by default
  row_ce.index_copy_(0, idx, ce);
  row_correct.index_copy_(0, idx, correct.to(at::kBool));
  total.add_((ce * wrow).sum());
  if (a.write_grad) dhidden.index_copy_(0, idx, at::matmul(logits, lm_head));
}

struct LossPass {
  at::Tensor loss, row_ce, row_correct, dhidden;  // dhidden: d loss / d hidden, undefined unless need_grad
  at::Tensor top_ids, top_logits;                 // [R, k] when top.k > 0, else empty [0, 0]
};

// The whole loss, chunk by chunk. The gradient w.r.t. hidden is computed here, while each chunk's logits
// exist anyway (as Liger's fused linear cross-entropy does): backward then only scales it by the incoming
// gradient. That is 2 LM-head GEMMs per chunk instead of 3 (forward, recomputed forward, grad), still with
// no stored logits; the price is one [R, H] tensor kept from forward to backward instead of `hidden`.
LossPass loss_pass(const at::Tensor& hidden, const at::Tensor& lm_head, const at::Tensor& labels,
                   const at::Tensor& weights, const at::Tensor& teacher_hidden, const at::Tensor& teacher_index,
                   int64_t chunk_rows, double kl_weight, bool need_grad, bool fused_ce, const UnaryTopKOptions& top) {
  const at::ScalarType acc = acc_of(hidden);
  const at::Tensor w = weights.to(acc);
  const at::Tensor rows = at::nonzero(w > 0).view({-1});
  const at::Tensor wsum = w.sum();
  const double wsum_value = wsum.item<double>();
  const bool soft = kl_weight != 0.0;
  const bool fused = fused_ce && !soft && hidden.device().is_cpu() &&
                     (hidden.scalar_type() == at::kFloat || hidden.scalar_type() == at::kBFloat16);
  at::Tensor total = at::zeros({}, hidden.options().dtype(acc));
  LossPass p;
  p.row_ce = at::zeros({hidden.size(0)}, hidden.options().dtype(acc));
  p.row_correct = at::zeros({hidden.size(0)}, hidden.options().dtype(at::kBool));
  if (need_grad) p.dhidden = at::zeros_like(hidden);
  // Rows of weight 0 are not computed: they keep columns 0..k-1 with logits 0 (valid ids that weigh nothing).
  const auto long_opts = hidden.options().dtype(at::kLong);
  p.top_ids = top.k > 0 ? at::arange(top.k, long_opts).repeat({hidden.size(0), 1}) : at::empty({0, 0}, long_opts);
  p.top_logits = at::zeros({top.k > 0 ? hidden.size(0) : 0, top.k}, hidden.options());
  for (int64_t c0 = 0; c0 < rows.size(0); c0 += chunk_rows) {
    const at::Tensor idx = rows.narrow(0, c0, std::min(chunk_rows, rows.size(0) - c0));
    const at::Tensor lab = labels.index_select(0, idx);
    const at::Tensor wrow = w.index_select(0, idx);
    if (fused) {
      fused_chunk(hidden.index_select(0, idx), lm_head, lab, wrow, need_grad && wsum_value > 0 ? wsum_value : 0,
                  idx, total, p.row_ce, p.row_correct, p.dhidden, top, p.top_ids, p.top_logits);
      continue;
    }
    at::Tensor logits = chunk_logits(hidden.index_select(0, idx), lm_head, acc);
    keep_top_k(logits, hidden.scalar_type(), top, idx, p.top_ids, p.top_logits);
    const at::Tensor lse = at::logsumexp(logits, -1);
    const at::Tensor ce = lse - logits.gather(1, lab.unsqueeze(1)).squeeze(1);
    p.row_ce.index_copy_(0, idx, ce);
    p.row_correct.index_copy_(0, idx, logits.argmax(-1).eq(lab));
    at::Tensor row_loss = ce;
    at::Tensor q;
    if (soft) {
      at::Tensor logq = chunk_logits(teacher_hidden.index_select(0, teacher_index.index_select(0, idx)), lm_head, acc);
      logq.sub_(at::logsumexp(logq, -1, true));
      q = logq.exp();
      // KL(q || p) = sum q log q - sum q * logits + lse (sum q = 1); row dot products via bmm, no rows x V temp.
      const at::Tensor q3 = q.unsqueeze(1);
      const at::Tensor kl = at::bmm(q3, logq.unsqueeze(2)).view({-1}) - at::bmm(q3, logits.unsqueeze(2)).view({-1}) + lse;
      row_loss = ce * (1.0 - kl_weight) + kl * kl_weight;
    }
    total.add_((row_loss * wrow).sum());
    if (need_grad && wsum_value > 0) {
      logits_to_grad_(logits, lse, q, lab, wrow / wsum, kl_weight);
      p.dhidden.index_copy_(0, idx, at::matmul(logits.to(hidden.scalar_type()), lm_head));
    }
  }
  p.loss = wsum_value > 0 ? total / wsum : total;
  return p;
}

class ChunkedLossFunction : public torch::autograd::Function<ChunkedLossFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, const at::Tensor& hidden, const at::Tensor& lm_head,
                               const at::Tensor& labels, const at::Tensor& weights, const at::Tensor& teacher_hidden,
                               const at::Tensor& teacher_index, int64_t chunk_rows, double kl_weight, bool need_grad,
                               bool fused_ce, int64_t top_k, double output_multiplier, double softcap) {
    LossPass p = loss_pass(hidden, lm_head, labels, weights, teacher_hidden, teacher_index, chunk_rows, kl_weight,
                           need_grad, fused_ce, {top_k, output_multiplier, softcap});
    if (need_grad) ctx->save_for_backward({p.dhidden});
    ctx->mark_non_differentiable({p.row_ce, p.row_correct, p.top_ids, p.top_logits});
    return {p.loss, p.row_ce, p.row_correct, p.top_ids, p.top_logits};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto s = ctx->get_saved_variables();
    at::Tensor dhidden;
    if (!s.empty() && s[0].defined()) {
      dhidden = s[0];
      // The loss is a scalar: d(hidden) = d(loss)/d(hidden) * incoming gradient.
      if (grads[0].defined()) dhidden = dhidden * grads[0].to(dhidden.scalar_type());
      else dhidden = at::zeros_like(dhidden);
    }
    variable_list out(13);  // one per forward input; only hidden gets a gradient
    out[0] = dhidden;
    return out;
  }
};

using LossOutputs = std::tuple<at::Tensor, at::Tensor, at::Tensor>;

// Autograd functions take no undefined tensors: without soft labels the teacher inputs are empty.
std::pair<at::Tensor, at::Tensor> teacher_inputs(const at::Tensor& hidden, const std::optional<at::Tensor>& th,
                                                 const std::optional<at::Tensor>& ti, double kl_weight) {
  if (kl_weight == 0.0)
    return {hidden.new_empty({0, hidden.size(1)}), at::empty({0}, hidden.options().dtype(at::kLong))};
  return {th->to(hidden.scalar_type()), ti->reshape({-1})};
}

void check_or_throw_value_error(const at::Tensor& hidden, const at::Tensor& lm_head, const at::Tensor& labels,
                                const at::Tensor& weights, const std::optional<at::Tensor>& th,
                                const std::optional<at::Tensor>& ti, int64_t chunk_rows, double kl_weight) {
  const std::string bad = check_chunked_lm_loss_args(hidden, lm_head, labels, weights, th, ti, chunk_rows, kl_weight);
  TORCH_CHECK_VALUE(bad.empty(), bad);
}

// The loss through its autograd function (hidden gets a gradient when grad mode is on and it requires one), with
// all five outputs.
LossPass loss_with_top_k(const at::Tensor& hidden, const at::Tensor& lm_head, const at::Tensor& labels,
                         const at::Tensor& weights, const std::optional<at::Tensor>& teacher_hidden,
                         const std::optional<at::Tensor>& teacher_index, int64_t chunk_rows, double kl_weight,
                         bool fused_ce, const UnaryTopKOptions& top) {
  check_or_throw_value_error(hidden, lm_head, labels, weights, teacher_hidden, teacher_index, chunk_rows, kl_weight);
  const auto [th, ti] = teacher_inputs(hidden, teacher_hidden, teacher_index, kl_weight);
  const bool need_grad = at::GradMode::is_enabled() && hidden.requires_grad();
  auto out = ChunkedLossFunction::apply(hidden, lm_head.detach(), labels.reshape({-1}), weights.reshape({-1}), th, ti,
                                        chunk_rows, kl_weight, need_grad, fused_ce, top.k, top.output_multiplier,
                                        top.final_logit_softcapping);
  LossPass p;
  p.loss = out[0], p.row_ce = out[1], p.row_correct = out[2], p.top_ids = out[3], p.top_logits = out[4];
  return p;
}

LossOutputs loss_autograd(const at::Tensor& hidden, const at::Tensor& lm_head, const at::Tensor& labels,
                          const at::Tensor& weights, const std::optional<at::Tensor>& teacher_hidden,
                          const std::optional<at::Tensor>& teacher_index, int64_t chunk_rows, double kl_weight,
                          bool fused_ce) {
  const LossPass p = loss_with_top_k(hidden, lm_head, labels, weights, teacher_hidden, teacher_index, chunk_rows,
                                     kl_weight, fused_ce, {});
  return {p.loss, p.row_ce, p.row_correct};
}

LossOutputs loss_inference(const at::Tensor& hidden, const at::Tensor& lm_head, const at::Tensor& labels,
                           const at::Tensor& weights, const std::optional<at::Tensor>& teacher_hidden,
                           const std::optional<at::Tensor>& teacher_index, int64_t chunk_rows, double kl_weight,
                           bool fused_ce) {
  check_or_throw_value_error(hidden, lm_head, labels, weights, teacher_hidden, teacher_index, chunk_rows, kl_weight);
  const auto [th, ti] = teacher_inputs(hidden, teacher_hidden, teacher_index, kl_weight);
  LossPass p = loss_pass(hidden, lm_head, labels.reshape({-1}), weights.reshape({-1}), th, ti, chunk_rows, kl_weight,
                         false, fused_ce, {});
  return {p.loss, p.row_ce, p.row_correct};
}

}  // namespace

std::string check_chunked_lm_loss_args(const at::Tensor& hidden, const at::Tensor& lm_head, const at::Tensor& labels,
                                       const at::Tensor& weights, const std::optional<at::Tensor>& teacher_hidden,
                                       const std::optional<at::Tensor>& teacher_index, int64_t chunk_rows,
                                       double kl_weight) {
  // One device first: the dispatcher would otherwise pick a kernel by the odd tensor out (meta: "no kernel").
  for (const auto& [name, t] : std::initializer_list<std::pair<const char*, const at::Tensor*>>{
           {"lm_head", &lm_head}, {"labels", &labels}, {"weights", &weights},
           {"teacher_hidden", teacher_hidden.has_value() ? &*teacher_hidden : nullptr},
           {"teacher_index", teacher_index.has_value() ? &*teacher_index : nullptr}})
    if (t && t->defined() && t->device() != hidden.device())
      return std::string("chunked_lm_loss: ") + name + " is on " + t->device().str() + " but hidden is on " +
             hidden.device().str() + "; every tensor argument must be on one device";
  if (hidden.dim() != 2 || lm_head.dim() != 2 || hidden.size(1) != lm_head.size(1))
    return "chunked_lm_loss: hidden [R, H] and lm_head [V, H] must share H";
  if (labels.numel() != hidden.size(0) || weights.numel() != hidden.size(0))
    return "chunked_lm_loss: labels and weights need one entry per hidden row";
  if (labels.scalar_type() != at::kLong)
    return std::string("chunked_lm_loss: labels must have dtype Long (int64), got ") + c10::toString(labels.scalar_type());
  if (!at::isFloatingType(hidden.scalar_type()) || lm_head.scalar_type() != hidden.scalar_type())
    return std::string("chunked_lm_loss: hidden must be floating-point and lm_head of its dtype, got ") +
           c10::toString(hidden.scalar_type()) + " and " + c10::toString(lm_head.scalar_type());
  if (!at::isFloatingType(weights.scalar_type()))
    return std::string("chunked_lm_loss: weights must be floating-point, got ") + c10::toString(weights.scalar_type());
  if (chunk_rows <= 0) return "chunked_lm_loss: chunk_rows must be positive";
  if (!(kl_weight >= 0 && kl_weight <= 1))  // NaN too: it made a NaN loss
    return "chunked_lm_loss: kl_weight must be a finite number in [0, 1], got " + c10::str(kl_weight);
  const bool have_teacher = teacher_hidden.has_value() && teacher_hidden->defined() && teacher_index.has_value() &&
                            teacher_index->defined();
  if (have_teacher && kl_weight != 0.0 && teacher_index->scalar_type() != at::kLong)
    return std::string("chunked_lm_loss: teacher_index must have dtype Long (int64), got ") +
           c10::toString(teacher_index->scalar_type());
  if (kl_weight != 0.0 && !have_teacher) return "chunked_lm_loss: kl_weight > 0 needs the target's last hidden states";
  return {};
}

TORCH_LIBRARY_FRAGMENT(dflash, m) {
  m.def("chunked_lm_loss(Tensor hidden, Tensor lm_head, Tensor labels, Tensor weights, Tensor? teacher_hidden=None, "
        "Tensor? teacher_index=None, int chunk_rows=1024, float kl_weight=0.0, bool fused_ce=True) "
        "-> (Tensor, Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(dflash, Autograd, m) { m.impl("chunked_lm_loss", &loss_autograd); }
TORCH_LIBRARY_IMPL(dflash, CompositeExplicitAutograd, m) { m.impl("chunked_lm_loss", &loss_inference); }

namespace {

// The C++ entry points take undefined tensors for "no teacher"; the op takes optionals. Checked as the op checks
// them, but as std::invalid_argument (the op's own check raises ValueError for Python).
std::pair<std::optional<at::Tensor>, std::optional<at::Tensor>> checked_teacher(
    const at::Tensor& hidden, const at::Tensor& lm_head, const at::Tensor& labels, const at::Tensor& weights,
    const at::Tensor& teacher_hidden, const at::Tensor& teacher_index, const ChunkedLossOptions& opt) {
  std::optional<at::Tensor> th = teacher_hidden.defined() ? std::optional(teacher_hidden) : std::nullopt;
  std::optional<at::Tensor> ti = teacher_index.defined() ? std::optional(teacher_index) : std::nullopt;
  if (const std::string bad = check_chunked_lm_loss_args(hidden, lm_head, labels, weights, th, ti, opt.chunk_rows,
                                                         opt.kl_weight);
      !bad.empty())
    throw std::invalid_argument(bad);
  return {std::move(th), std::move(ti)};
}

}  // namespace

std::tuple<at::Tensor, at::Tensor, at::Tensor> chunked_lm_loss(const at::Tensor& hidden, const at::Tensor& lm_head,
                                                               const at::Tensor& labels, const at::Tensor& weights,
                                                               const at::Tensor& teacher_hidden,
                                                               const at::Tensor& teacher_index,
                                                               const ChunkedLossOptions& opt) {
  const auto [th, ti] = checked_teacher(hidden, lm_head, labels, weights, teacher_hidden, teacher_index, opt);
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("dflash::chunked_lm_loss", "")
                             .typed<std::tuple<at::Tensor, at::Tensor, at::Tensor>(
                                 const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                 const std::optional<at::Tensor>&, const std::optional<at::Tensor>&, int64_t, double,
                                 bool)>();
  return op.call(hidden, lm_head, labels, weights, th, ti, opt.chunk_rows, opt.kl_weight, opt.fused_ce);
}

ChunkedLossWithTopK chunked_lm_loss_with_top_k(const at::Tensor& hidden, const at::Tensor& lm_head,
                                               const at::Tensor& labels, const at::Tensor& weights,
                                               const at::Tensor& teacher_hidden, const at::Tensor& teacher_index,
                                               const ChunkedLossOptions& opt, const UnaryTopKOptions& top) {
  if (top.k < 0) throw std::invalid_argument("chunked_lm_loss: the selector's top-K needs k >= 0");
  const auto [th, ti] = checked_teacher(hidden, lm_head, labels, weights, teacher_hidden, teacher_index, opt);
  const LossPass p = loss_with_top_k(hidden, lm_head, labels, weights, th, ti, opt.chunk_rows, opt.kl_weight,
                                     opt.fused_ce, top);
  return {p.loss, p.row_ce, p.row_correct, p.top_ids, p.top_logits};
}

}  // namespace dflash::ops
