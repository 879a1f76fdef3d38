// Schema, autograd and the C++ entry point of dflash::dspark_lm_loss. Device-generic (ATen calls), with the fused
// CPU kernel (src/kernels/dspark_objective_rows.h) for float32 / bfloat16 on the CPU.
#include "dspark_lm_loss_op.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include "dspark_objective_rows.h"

namespace dflash::ops {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

at::ScalarType acc_of(const at::Tensor& t) { return t.scalar_type() == at::kDouble ? at::kDouble : at::kFloat; }

bool present(const at::Tensor& t) { return t.defined() && t.numel() > 0; }

struct Pass {
  at::Tensor loss, terms, row_accept, row_correct;
  at::Tensor dhidden, dmarkov, dw2, dconf;  // d loss / d input, defined only when need_grad
};

// Sums over the chunks (accumulation dtype).
struct Sums {
  at::Tensor ce, l1, bce;
};

// The distinct target positions of a chunk's rows: rows whose blocks overlap (slot j of anchor a, slot j - 1 of
// anchor a + 1) share a position, and so its teacher logits. `shared` is defined when some rows share one: then
// the teacher's GEMM runs over `positions` (fewer rows) and row i reads row shared[i] of it (issue 51).
struct TeacherRows {
  at::Tensor positions, shared;
};

TeacherRows teacher_rows_of(const at::Tensor& teacher_index, const at::Tensor& idx) {
  const at::Tensor pos = teacher_index.index_select(0, idx);
  auto [distinct, inverse] = at::_unique(pos, /*sorted=*/true, /*return_inverse=*/true);
  if (distinct.size(0) == pos.size(0)) return {pos, at::Tensor()};
  return {distinct, inverse.contiguous()};
}

// One chunk through the fused kernel: the logits (Markov bias added in place) and the teacher's stay in the hidden
// dtype, the GEMMs' own outputs; the kernel writes the per-row terms and, with grads, d loss / d logits over the
// logits, which the backward GEMMs then read directly. Two rows x V buffers in the hidden dtype, no float32 copies.
void fused_chunk(const at::Tensor& hidden, const at::Tensor& lm_head, const at::Tensor& labels, const at::Tensor& w,
                 const at::Tensor& markov, const at::Tensor& w2, const at::Tensor& teacher_hidden,
                 const at::Tensor& teacher_index, const at::Tensor& confidence, const DSparkLossOptions& o, double den,
                 bool grads, const at::Tensor& idx, Sums& sums, Pass& p) {
  const at::ScalarType dt = hidden.scalar_type();
  const at::Tensor lab = labels.index_select(0, idx).contiguous();
  const at::Tensor wrow = w.index_select(0, idx);
  at::Tensor logits = at::linear(hidden.index_select(0, idx), lm_head).contiguous();  // [r, V]
  const bool has_markov = markov.defined(), has_teacher = teacher_hidden.defined(), has_conf = confidence.defined();
  at::Tensor u;
  if (has_markov) {
    u = markov.index_select(0, idx).to(dt);
    logits.addmm_(u, w2.t());  // + W2 u: the Markov bias, never formed on its own
  }
  at::Tensor teacher;
  TeacherRows trows;
  if (has_teacher) {
    trows = teacher_rows_of(teacher_index, idx);
    teacher = at::linear(teacher_hidden.index_select(0, trows.positions), lm_head).contiguous();
  }
  const int64_t r = logits.size(0);
  const auto f32 = logits.options().dtype(at::kFloat);
  const at::Tensor scale = (wrow / den).to(at::kFloat).contiguous();
  const at::Tensor c = has_conf ? confidence.index_select(0, idx).to(at::kFloat).contiguous() : at::Tensor();
  at::Tensor lse = at::empty({r}, f32), ce = at::empty({r}, f32), l1 = at::empty({r}, f32), acc = at::empty({r}, f32);
  at::Tensor bce = at::empty({r}, f32), dconf = at::empty({r}, f32);
  at::Tensor correct = at::empty({r}, f32.dtype(at::kByte));
  kernels::DSparkRowsArgs a;
  a.dtype = dt == at::kBFloat16 ? kernels::ScalarType::BFloat16 : kernels::ScalarType::Float32;
  a.rows = r, a.vocab = logits.size(1), a.ld = logits.stride(0);
  a.logits = logits.data_ptr();
  a.teacher = has_teacher ? teacher.data_ptr() : nullptr;
  a.teacher_ld = has_teacher ? teacher.stride(0) : 0;
  if (trows.shared.defined()) {
    a.teacher_rows = trows.shared.data_ptr<int64_t>();
    a.teacher_count = teacher.size(0);
  }
  a.labels = lab.data_ptr<int64_t>();
  a.scale = scale.data_ptr<float>();
  a.ce_weight = float(o.ce_weight), a.l1_weight = float(o.l1_weight), a.confidence_weight = float(o.confidence_weight);
  a.write_grad = grads;
  a.confidence = has_conf ? c.data_ptr<float>() : nullptr;
  a.lse = lse.data_ptr<float>(), a.ce = ce.data_ptr<float>(), a.l1 = l1.data_ptr<float>();
  a.accept = acc.data_ptr<float>(), a.correct = correct.data_ptr<uint8_t>();
  a.bce = bce.data_ptr<float>(), a.dconf = dconf.data_ptr<float>();
  if (const std::string err = kernels::check_dspark_rows(a); !err.empty()) throw std::invalid_argument(err);
  at::parallel_for(0, r, 8, [&](int64_t r0, int64_t r1) { kernels::dspark_rows_cpu(a, r0, r1); });
  teacher = at::Tensor();  // the teacher's chunk is done with before the backward GEMMs allocate
  p.row_correct.index_copy_(0, idx, correct.to(at::kBool));
  sums.ce.add_((ce * wrow).sum());
  if (has_teacher) {
    p.row_accept.index_copy_(0, idx, acc);
    sums.l1.add_((l1 * wrow).sum());
  }
  if (has_conf) {
    sums.bce.add_((bce * wrow).sum());
    if (grads) p.dconf.index_copy_(0, idx, dconf.to(confidence.scalar_type()));
  }
  if (!grads) return;
  p.dhidden.index_copy_(0, idx, at::matmul(logits, lm_head));
  if (has_markov) {
    p.dmarkov.index_copy_(0, idx, at::matmul(logits, w2).to(markov.scalar_type()));
    // dW2: the first chunk's GEMM is written as it comes (in the hidden dtype: W2's when it is the only chunk);
    // later chunks sum into a float32 copy (bf16 GEMMs accumulate in float inside, the chunks too).
    if (!p.dw2.defined()) p.dw2 = at::mm(logits.t(), u);
    else if (p.dw2.scalar_type() == at::kFloat && dt == at::kFloat) p.dw2.addmm_(logits.t(), u);
    else p.dw2 = p.dw2.to(at::kFloat).add_(at::mm(logits.t(), u));
  }
}

// The whole objective, chunk by chunk. Per chunk the rows x V buffers are the logits (turned into q in place, then
// into the gradient), the teacher's logits (turned into pi, q - pi, then sign(q - pi) in place) and one temporary
// of |q - pi|: three, as chunked_lm_loss.
Pass dspark_pass(const at::Tensor& hidden, const at::Tensor& lm_head, const at::Tensor& labels,
                 const at::Tensor& weights, const at::Tensor& markov, const at::Tensor& w2_in,
                 const at::Tensor& teacher_hidden, const at::Tensor& teacher_index, const at::Tensor& confidence,
                 const DSparkLossOptions& o, bool need_grad) {
  const at::ScalarType acc = acc_of(hidden), dt = hidden.scalar_type();
  const at::Tensor w = weights.to(acc);
  const at::Tensor rows = at::nonzero(w > 0).view({-1});
  const double den = w.sum().item<double>() + o.den_eps;
  const bool has_markov = present(markov), has_teacher = present(teacher_hidden), has_conf = present(confidence);
  // The fused CPU kernel for float32 / bf16 (the LM head in the hidden states' dtype, as the GEMM needs).
  const bool fused = o.fused && hidden.device().is_cpu() && (dt == at::kFloat || dt == at::kBFloat16) &&
                     lm_head.scalar_type() == dt;
  // W2 in the hidden dtype (a no-op for the trainer's weights); the accumulation-dtype copy only where the generic
  // passes read it (a [V, r] copy per step in bf16).
  const at::Tensor w2 = has_markov ? w2_in.to(dt) : at::Tensor();
  const at::Tensor w2_acc = has_markov && !fused ? w2_in.to(acc) : at::Tensor();
  const auto acc_opts = hidden.options().dtype(acc);
  at::Tensor ce_sum = at::zeros({}, acc_opts), l1_sum = at::zeros({}, acc_opts), bce_sum = at::zeros({}, acc_opts);
  Pass p;
  p.row_accept = at::zeros({hidden.size(0)}, acc_opts);
  p.row_correct = at::zeros({hidden.size(0)}, hidden.options().dtype(at::kBool));
  const bool grads = need_grad && den > 0;
  if (need_grad) {
    p.dhidden = at::zeros_like(hidden);
    if (has_markov) p.dmarkov = at::zeros_like(markov);
    if (has_markov && !fused) p.dw2 = at::zeros_like(w2_acc);  // the fused chunks write dW2 themselves
    if (has_conf) p.dconf = at::zeros_like(confidence);
  }
  Sums sums{ce_sum, l1_sum, bce_sum};
  for (int64_t c0 = 0; c0 < rows.size(0); c0 += o.chunk_rows) {
    const at::Tensor idx = rows.narrow(0, c0, std::min(o.chunk_rows, rows.size(0) - c0));
    if (fused) {
      fused_chunk(hidden, lm_head, labels, w, has_markov ? markov : at::Tensor(), w2,
                  has_teacher ? teacher_hidden : at::Tensor(), teacher_index, has_conf ? confidence : at::Tensor(), o,
                  den, grads, idx, sums, p);
      continue;
    }
    const at::Tensor lab = labels.index_select(0, idx).unsqueeze(1);
    const at::Tensor wrow = w.index_select(0, idx);
    at::Tensor logits = at::linear(hidden.index_select(0, idx), lm_head).to(acc);  // [r, V]
    at::Tensor u;
    if (has_markov) {
      u = markov.index_select(0, idx).to(acc);
      logits.addmm_(u, w2_acc.t());  // + W2 u: the Markov bias, never formed on its own
    }
    const at::Tensor lse = at::logsumexp(logits, -1);
    const at::Tensor ce = lse - logits.gather(1, lab).squeeze(1);
    p.row_correct.index_copy_(0, idx, logits.argmax(-1).eq(lab.squeeze(1)));
    ce_sum.add_((ce * wrow).sum());
    at::Tensor q = logits.sub_(lse.unsqueeze(1)).exp_();
    at::Tensor grad;  // d loss / d logits of the chunk, before the row scale w / den
    if (has_teacher) {
      const TeacherRows trows = teacher_rows_of(teacher_index, idx);
      at::Tensor diff = at::linear(teacher_hidden.index_select(0, trows.positions), lm_head).to(acc);
      if (trows.shared.defined()) diff = diff.index_select(0, trows.shared);  // a row per drafted row: diff is scratch
      diff.sub_(at::logsumexp(diff, -1, true)).exp_().neg_().add_(q);  // q - pi
      const at::Tensor l1 = diff.abs().sum(-1);
      const at::Tensor accept = (1.0 - 0.5 * l1).clamp(0.0, 1.0);
      p.row_accept.index_copy_(0, idx, accept);
      l1_sum.add_((l1 * wrow).sum());
      if (has_conf) {
        const at::Tensor c = confidence.index_select(0, idx).to(acc);
        const at::Tensor bce = c.clamp_min(0) - c * accept + at::log1p(at::exp(-c.abs()));
        bce_sum.add_((bce * wrow).sum());
        if (grads)
          p.dconf.index_copy_(0, idx, ((at::sigmoid(c) - accept) * wrow * (o.confidence_weight / den)).to(confidence.scalar_type()));
      }
      if (grads) {
        // d l1 / d l_v = q_v (s_v - sum_u s_u q_u) with s = sign(q - pi); with the CE's q - onehot:
        // grad = q (ce_w + l1_w (s - <s, q>)) - ce_w onehot.
        at::Tensor s = diff.sign_();
        const at::Tensor sq = at::bmm(s.unsqueeze(1), q.unsqueeze(2)).view({-1, 1});
        grad = s.sub_(sq).mul_(o.l1_weight).add_(o.ce_weight).mul_(q);
      }
    } else if (grads) {
      grad = q.mul_(o.ce_weight);
    }
    if (!grads) continue;
    grad.scatter_add_(1, lab, at::full({lab.size(0), 1}, -o.ce_weight, grad.options()));
    grad.mul_((wrow / den).unsqueeze(1));
    const at::Tensor g = grad.to(dt);
    p.dhidden.index_copy_(0, idx, at::matmul(g, lm_head));
    if (has_markov) {
      p.dmarkov.index_copy_(0, idx, at::matmul(g, w2));
      p.dw2.addmm_(grad.t(), u);
    }
  }
  p.terms = den > 0 ? at::stack({ce_sum, l1_sum, bce_sum}) / den : at::stack({ce_sum, l1_sum, bce_sum});
  p.loss = o.ce_weight * p.terms[0] + o.l1_weight * p.terms[1] + o.confidence_weight * p.terms[2];
  if (has_markov && need_grad && !p.dw2.defined()) p.dw2 = at::zeros_like(w2_in);  // no chunk ran
  if (p.dw2.defined()) p.dw2 = p.dw2.to(w2_in.scalar_type());
  return p;
}

DSparkLossOptions options_of(int64_t chunk_rows, double ce, double l1, double conf, double den_eps, bool fused) {
  DSparkLossOptions o;
  o.chunk_rows = chunk_rows, o.ce_weight = ce, o.l1_weight = l1, o.confidence_weight = conf, o.den_eps = den_eps;
  o.fused = fused;
  return o;
}

class DSparkLossFunction : public torch::autograd::Function<DSparkLossFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, const at::Tensor& hidden, const at::Tensor& lm_head,
                               const at::Tensor& labels, const at::Tensor& weights, const at::Tensor& markov,
                               const at::Tensor& w2, const at::Tensor& th, const at::Tensor& ti,
                               const at::Tensor& conf, int64_t chunk_rows, double ce, double l1, double cw,
                               double den_eps, bool fused) {
    Pass p = dspark_pass(hidden, lm_head, labels, weights, markov, w2, th, ti, conf,
                         options_of(chunk_rows, ce, l1, cw, den_eps, fused), true);
    auto or_empty = [](const at::Tensor& t) { return t.defined() ? t : at::Tensor(); };
    ctx->save_for_backward({p.dhidden, or_empty(p.dmarkov), or_empty(p.dw2), or_empty(p.dconf)});
    ctx->mark_non_differentiable({p.terms, p.row_accept, p.row_correct});
    return {p.loss, p.terms, p.row_accept, p.row_correct};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto s = ctx->get_saved_variables();
    auto scaled = [&](const at::Tensor& d) -> at::Tensor {
      if (!d.defined()) return {};
      return grads[0].defined() ? d * grads[0].to(d.scalar_type()) : at::zeros_like(d);
    };
    return {scaled(s[0]), at::Tensor(), at::Tensor(), at::Tensor(), scaled(s[1]), scaled(s[2]), at::Tensor(),
            at::Tensor(), scaled(s[3]), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(),
            at::Tensor()};
  }
};

using Outputs = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor>;
using Opt = std::optional<at::Tensor>;

// Autograd functions take no undefined tensors: absent inputs become empty ones.
at::Tensor or_empty(const Opt& t, const at::Tensor& like) {
  return t && t->defined() ? *t : like.new_empty({0});
}

Outputs op_autograd(const at::Tensor& hidden, const at::Tensor& lm_head, const at::Tensor& labels,
                    const at::Tensor& weights, const Opt& markov, const Opt& w2, const Opt& th, const Opt& ti,
                    const Opt& conf, int64_t chunk_rows, double ce, double l1, double cw, double den_eps,
                    bool fused) {
  const DSparkLossOptions o = options_of(chunk_rows, ce, l1, cw, den_eps, fused);
  const std::string bad = check_dspark_lm_loss_args(hidden, lm_head, labels, weights, markov, w2, th, ti, conf, o);
  TORCH_CHECK_VALUE(bad.empty(), bad);
  auto grad_wanted = [](const Opt& t) { return t && t->defined() && t->requires_grad(); };
  const bool need_grad = at::GradMode::is_enabled() &&
                         (hidden.requires_grad() || grad_wanted(markov) || grad_wanted(w2) || grad_wanted(conf));
  const at::Tensor teacher = th && th->defined() ? th->to(hidden.scalar_type()) : hidden.new_empty({0});
  const at::Tensor tindex = ti && ti->defined() ? ti->reshape({-1}) : at::empty({0}, hidden.options().dtype(at::kLong));
  if (!need_grad) {
    Pass p = dspark_pass(hidden, lm_head, labels.reshape({-1}), weights.reshape({-1}), or_empty(markov, hidden),
                         or_empty(w2, hidden), teacher, tindex, or_empty(conf, hidden), o, false);
    return {p.loss, p.terms, p.row_accept, p.row_correct};
  }
  auto out = DSparkLossFunction::apply(hidden, lm_head.detach(), labels.reshape({-1}), weights.reshape({-1}),
                                       or_empty(markov, hidden), or_empty(w2, hidden), teacher, tindex,
                                       or_empty(conf, hidden), chunk_rows, ce, l1, cw, den_eps, fused);
  return {out[0], out[1], out[2], out[3]};
}

Outputs op_inference(const at::Tensor& hidden, const at::Tensor& lm_head, const at::Tensor& labels,
                     const at::Tensor& weights, const Opt& markov, const Opt& w2, const Opt& th, const Opt& ti,
                     const Opt& conf, int64_t chunk_rows, double ce, double l1, double cw, double den_eps,
                    bool fused) {
  const DSparkLossOptions o = options_of(chunk_rows, ce, l1, cw, den_eps, fused);
  const std::string bad = check_dspark_lm_loss_args(hidden, lm_head, labels, weights, markov, w2, th, ti, conf, o);
  TORCH_CHECK_VALUE(bad.empty(), bad);
  const at::Tensor teacher = th && th->defined() ? th->to(hidden.scalar_type()) : hidden.new_empty({0});
  const at::Tensor tindex = ti && ti->defined() ? ti->reshape({-1}) : at::empty({0}, hidden.options().dtype(at::kLong));
  Pass p = dspark_pass(hidden, lm_head, labels.reshape({-1}), weights.reshape({-1}), or_empty(markov, hidden),
                       or_empty(w2, hidden), teacher, tindex, or_empty(conf, hidden), o, false);
  return {p.loss, p.terms, p.row_accept, p.row_correct};
}

}  // namespace

std::string check_dspark_lm_loss_args(const at::Tensor& hidden, const at::Tensor& lm_head, const at::Tensor& labels,
                                      const at::Tensor& weights, const Opt& markov, const Opt& w2, const Opt& th,
                                      const Opt& ti, const Opt& conf, const DSparkLossOptions& o) {
  auto has = [](const Opt& t) { return t.has_value() && t->defined(); };
  if (hidden.dim() != 2 || lm_head.dim() != 2 || hidden.size(1) != lm_head.size(1))
    return "dspark_lm_loss: hidden [R, H] and lm_head [V, H] must share H";
  const int64_t R = hidden.size(0), V = lm_head.size(0), H = hidden.size(1);
  if (labels.numel() != R || weights.numel() != R)
    return "dspark_lm_loss: labels and weights need one entry per hidden row";
  if (labels.scalar_type() != at::kLong) return "dspark_lm_loss: labels must have dtype Long (int64)";
  if (o.chunk_rows <= 0) return "dspark_lm_loss: chunk_rows must be positive";
  for (double x : {o.ce_weight, o.l1_weight, o.confidence_weight, o.den_eps})
    if (!std::isfinite(x) || x < 0) return "dspark_lm_loss: the loss weights and den_eps must be finite and >= 0";
  if (has(markov) != has(w2)) return "dspark_lm_loss: markov [R, r] and markov_w2 [V, r] go together";
  if (has(markov) && (markov->dim() != 2 || markov->size(0) != R || w2->dim() != 2 || w2->size(0) != V ||
                      w2->size(1) != markov->size(1)))
    return "dspark_lm_loss: markov must be [R, r] and markov_w2 [V, r] with R hidden rows and V head rows";
  if (has(conf) && conf->numel() != R) return "dspark_lm_loss: confidence needs one logit per hidden row";
  if (has(th) != has(ti)) return "dspark_lm_loss: teacher_hidden and teacher_index go together";
  if ((o.l1_weight > 0 || has(conf)) && !has(th))
    return "dspark_lm_loss: the L1 term and the confidence head need the target's last hidden states (teacher_hidden)";
  if (has(th)) {
    if (th->dim() != 2 || th->size(1) != H || ti->numel() != R || ti->scalar_type() != at::kLong)
      return "dspark_lm_loss: teacher_hidden must be [M, H] and teacher_index [R] int64";
    if (R > 0 && th->size(0) == 0) return "dspark_lm_loss: teacher_hidden has no rows";
    if (R > 0 && (ti->min().item<int64_t>() < 0 || ti->max().item<int64_t>() >= th->size(0)))
      return "dspark_lm_loss: teacher_index must lie in [0, " + std::to_string(th->size(0)) + ")";
  }
  if (R > 0 && (labels.min().item<int64_t>() < 0 || labels.max().item<int64_t>() >= V))
    return "dspark_lm_loss: labels must lie in [0, " + std::to_string(V) + ")";
  return {};
}

TORCH_LIBRARY_FRAGMENT(dflash, m) {
  m.def("dspark_lm_loss(Tensor hidden, Tensor lm_head, Tensor labels, Tensor weights, Tensor? markov=None, "
        "Tensor? markov_w2=None, Tensor? teacher_hidden=None, Tensor? teacher_index=None, Tensor? confidence=None, "
        "int chunk_rows=1024, float ce_weight=0.1, float l1_weight=0.9, float confidence_weight=1.0, "
        "float den_eps=1e-6, bool fused=True) -> (Tensor, Tensor, Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(dflash, Autograd, m) { m.impl("dspark_lm_loss", &op_autograd); }
TORCH_LIBRARY_IMPL(dflash, CompositeExplicitAutograd, m) { m.impl("dspark_lm_loss", &op_inference); }

DSparkLossOutputs dspark_lm_loss(const at::Tensor& hidden, const at::Tensor& lm_head, const at::Tensor& labels,
                                 const at::Tensor& weights, const at::Tensor& markov, const at::Tensor& markov_w2,
                                 const at::Tensor& teacher_hidden, const at::Tensor& teacher_index,
                                 const at::Tensor& confidence, const DSparkLossOptions& opt) {
  auto opt_of = [](const at::Tensor& t) { return t.defined() ? Opt(t) : std::nullopt; };
  const Opt m = opt_of(markov), w2 = opt_of(markov_w2), th = opt_of(teacher_hidden), ti = opt_of(teacher_index),
            c = opt_of(confidence);
  if (const std::string bad = check_dspark_lm_loss_args(hidden, lm_head, labels, weights, m, w2, th, ti, c, opt);
      !bad.empty())
    throw std::invalid_argument(bad);
  static const auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("dflash::dspark_lm_loss", "")
          .typed<Outputs(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&, const Opt&,
                         const Opt&, const Opt&, const Opt&, const Opt&, int64_t, double, double, double, double,
                         bool)>();
  const auto [loss, terms, accept, correct] = op.call(hidden, lm_head, labels, weights, m, w2, th, ti, c,
                                                      opt.chunk_rows, opt.ce_weight, opt.l1_weight,
                                                      opt.confidence_weight, opt.den_eps, opt.fused);
  return {loss, terms, accept, correct};
}

}  // namespace dflash::ops
