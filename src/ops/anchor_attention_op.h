// dflash::anchor_block_attention: the fused DFlash attention as a LibTorch op with autograd.
// Also callable from Python after torch.ops.load_library("libdflash_ops.so"):
//   torch.ops.dflash.anchor_block_attention(q, k, v, anchors, keep, block_size, window, scale, ctx_start)
//
// q [batch, N*B, Hq, D]; k, v [batch, S + N*B, Hkv, D]; anchors [batch, N] (or [N]) int64;
// keep [batch, N] (or [N]) bool; ctx_start [batch, N] (or [N]) int64 or undefined/None: block n sees
// context keys ctx_start[n] <= kv < anchors[n] (packed rows: its document's first token; undefined = 0).
// Returns [batch, N*B, Hq, D].
//
// backend: Fused runs the fused kernels (callers that pick it have run the self-check already, as train and
// eval do); Reference runs anchor_attention_reference.h; Auto checks the fused op once per process and shape
// kind and falls back to the reference with a warning (attention_selfcheck.h, resolve_attention_backend).
#pragma once
#include <optional>
#include <tuple>

#include <ATen/core/Tensor.h>

#include "attention_backend.h"

namespace dflash::ops {

at::Tensor anchor_block_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                  const at::Tensor& anchors, const at::Tensor& keep, int64_t block_size,
                                  int64_t window = 0, std::optional<double> scale = std::nullopt,
                                  const at::Tensor& ctx_start = at::Tensor(),
                                  AttentionBackend backend = AttentionBackend::Fused);

// The two halves without autograd: forward returns (out, lse); backward returns (dq, dk, dv).
std::tuple<at::Tensor, at::Tensor> anchor_block_attention_fwd(const at::Tensor& q, const at::Tensor& k,
                                                              const at::Tensor& v, const at::Tensor& anchors,
                                                              const at::Tensor& keep, int64_t block_size,
                                                              int64_t window, double scale,
                                                              const at::Tensor& ctx_start = at::Tensor());
std::tuple<at::Tensor, at::Tensor, at::Tensor> anchor_block_attention_bwd(
    const at::Tensor& dout, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
    const at::Tensor& out, const at::Tensor& lse, const at::Tensor& anchors, const at::Tensor& keep,
    int64_t block_size, int64_t window, double scale, const at::Tensor& ctx_start = at::Tensor());

}  // namespace dflash::ops
