// Schema, autograd and the C++ entry points of dflash::anchor_block_attention. The device kernels
// register themselves under the CPU / CUDA keys of the _fwd and _bwd ops.
#include "anchor_attention_op.h"

#include <cmath>
#include <vector>

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include "anchor_attention_checks.h"
#include "anchor_attention_reference.h"
#include "attention_selfcheck.h"
#include "fault_injection.h"

namespace dflash::ops {
namespace {

double resolve_scale(const at::Tensor& q, std::optional<double> scale) {
  return scale.has_value() ? checked_attention_scale(*scale) : 1.0 / std::sqrt(double(q.size(-1)));
}

std::optional<at::Tensor> optional_of(const at::Tensor& t) { return t.defined() ? std::optional<at::Tensor>(t) : std::nullopt; }

// Saves q, k, v, out and the row LSE (never the probabilities); backward recomputes them.
class AnchorAttentionFunction : public torch::autograd::Function<AnchorAttentionFunction> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k,
                            const at::Tensor& v, const at::Tensor& anchors, const at::Tensor& keep,
                            int64_t block_size, int64_t window, double scale,
                            const std::optional<at::Tensor>& ctx_start) {
    const at::Tensor cs = ctx_start_or_undefined(ctx_start);
    auto [out, lse] = anchor_block_attention_fwd(q, k, v, anchors, keep, block_size, window, scale, cs);
    // An undefined tensor cannot pass through autograd's saved variables: ctx_start is saved only when given.
    std::vector<at::Tensor> saved = {q, k, v, out, lse, anchors, keep};
    if (cs.defined()) saved.push_back(cs);
    ctx->save_for_backward(saved);
    ctx->saved_data["block_size"] = block_size;
    ctx->saved_data["window"] = window;
    ctx->saved_data["scale"] = scale;
    ctx->mark_non_differentiable({lse});
    return out;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto s = ctx->get_saved_variables();
    auto [dq, dk, dv] = anchor_block_attention_bwd(grads[0], s[0], s[1], s[2], s[3], s[4], s[5], s[6],
                                                   ctx->saved_data["block_size"].toInt(),
                                                   ctx->saved_data["window"].toInt(),
                                                   ctx->saved_data["scale"].toDouble(),
                                                   s.size() > 7 ? s[7] : at::Tensor());
    return {dq, dk, dv, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

at::Tensor attention_autograd(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                              const at::Tensor& anchors, const at::Tensor& keep, int64_t block_size, int64_t window,
                              std::optional<double> scale, const std::optional<at::Tensor>& ctx_start) {
  check_attention_devices("anchor_block_attention", q, k, v, anchors, keep, ctx_start_or_undefined(ctx_start));
  return AnchorAttentionFunction::apply(q, k, v, anchors, keep, block_size, window, resolve_scale(q, scale),
                                        ctx_start);
}

at::Tensor attention_inference(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                               const at::Tensor& anchors, const at::Tensor& keep, int64_t block_size, int64_t window,
                               std::optional<double> scale, const std::optional<at::Tensor>& ctx_start) {
  check_attention_devices("anchor_block_attention", q, k, v, anchors, keep, ctx_start_or_undefined(ctx_start));
  return std::get<0>(anchor_block_attention_fwd(q, k, v, anchors, keep, block_size, window, resolve_scale(q, scale),
                                                ctx_start_or_undefined(ctx_start)));
}

}  // namespace

TORCH_LIBRARY(dflash, m) {
  m.def("anchor_block_attention(Tensor q, Tensor k, Tensor v, Tensor anchors, Tensor keep, int block_size, "
        "int window=0, float? scale=None, Tensor? ctx_start=None) -> Tensor");
  m.def("anchor_block_attention_fwd(Tensor q, Tensor k, Tensor v, Tensor anchors, Tensor keep, int block_size, "
        "int window, float scale, Tensor? ctx_start=None) -> (Tensor, Tensor)");
  m.def("anchor_block_attention_bwd(Tensor dout, Tensor q, Tensor k, Tensor v, Tensor out, Tensor lse, "
        "Tensor anchors, Tensor keep, int block_size, int window, float scale, Tensor? ctx_start=None) "
        "-> (Tensor, Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(dflash, Autograd, m) { m.impl("anchor_block_attention", &attention_autograd); }
TORCH_LIBRARY_IMPL(dflash, CompositeExplicitAutograd, m) { m.impl("anchor_block_attention", &attention_inference); }

at::Tensor anchor_block_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                  const at::Tensor& anchors, const at::Tensor& keep, int64_t block_size,
                                  int64_t window, std::optional<double> scale, const at::Tensor& ctx_start,
                                  AttentionBackend backend) {
  if (backend == AttentionBackend::Auto)
    backend = resolve_attention_backend(backend, q, k, block_size, window, ctx_start.defined(),
                                        at::GradMode::is_enabled() && (q.requires_grad() || k.requires_grad() || v.requires_grad()));
  if (backend == AttentionBackend::Reference)
    return anchor_block_attention_reference(q, k, v, anchors, keep, block_size, window, scale, ctx_start);
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("dflash::anchor_block_attention", "")
                             .typed<at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                               const at::Tensor&, const at::Tensor&, int64_t, int64_t,
                                               std::optional<double>, const std::optional<at::Tensor>&)>();
  return op.call(q, k, v, anchors, keep, block_size, window, scale, optional_of(ctx_start));
}

std::tuple<at::Tensor, at::Tensor> anchor_block_attention_fwd(const at::Tensor& q, const at::Tensor& k,
                                                              const at::Tensor& v, const at::Tensor& anchors,
                                                              const at::Tensor& keep, int64_t block_size,
                                                              int64_t window, double scale, const at::Tensor& ctx_start) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("dflash::anchor_block_attention_fwd", "")
                             .typed<std::tuple<at::Tensor, at::Tensor>(const at::Tensor&, const at::Tensor&,
                                                                       const at::Tensor&, const at::Tensor&,
                                                                       const at::Tensor&, int64_t, int64_t, double,
                                                                       const std::optional<at::Tensor>&)>();
  auto result = op.call(q, k, v, anchors, keep, block_size, window, scale, optional_of(ctx_start));
  inject_attention_fault({std::get<0>(result)});  // test-only, off unless DFLASH_FAULT_INJECT says otherwise
  return result;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> anchor_block_attention_bwd(
    const at::Tensor& dout, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& out,
    const at::Tensor& lse, const at::Tensor& anchors, const at::Tensor& keep, int64_t block_size, int64_t window,
    double scale, const at::Tensor& ctx_start) {
  static const auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("dflash::anchor_block_attention_bwd", "")
          .typed<std::tuple<at::Tensor, at::Tensor, at::Tensor>(
              const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
              const at::Tensor&, const at::Tensor&, const at::Tensor&, int64_t, int64_t, double,
              const std::optional<at::Tensor>&)>();
  auto result = op.call(dout, q, k, v, out, lse, anchors, keep, block_size, window, scale, optional_of(ctx_start));
  inject_attention_fault({std::get<0>(result), std::get<1>(result), std::get<2>(result)});
  return result;
}

}  // namespace dflash::ops
