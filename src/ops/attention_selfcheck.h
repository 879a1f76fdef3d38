// The fused attention checked against the reference attention on one device: what `attention_backend: auto`
// (and `fused`) runs before training's first step and before eval decodes, and what `dflash doctor` runs at
// standard shapes. Reusable: a spec in, errors, tolerances, pass/fail, the exception and timings out.
//
// The check's inputs: 2 batch rows x 6 blocks at the spec's S, heads, head_dim, block size, window and dtype,
// q/k/v/dout drawn from N(0, 1). Row 0 has anchors 0, 1, S/2, S, S/3 and a dropped block anchored at S; row 1
// anchors S, S/4, 0, 2S/3, 1 and a dropped block at S-1. More blocks (num_blocks > 6, a realistic shape to time)
// get anchors spread evenly over [0, S], rising in row 0 and falling in row 1. With `packed`, each block's
// ctx_start is the start of its document (documents start at 0, S/4, S/2 and 3S/4), as packed rows give it.
//
// Tolerance rule, per tensor (out; with backward also dq, dk, dv), all errors being max |x - x64| where x64 is
// the reference computed in fp64 from the same (already rounded) inputs (selfcheck_tolerance.h):
//     err(fused) <= 2 * err(low) + 4 * eps(dtype) * max|x64|
// err(low) is the error of the reference computed in the dtype itself (scores, softmax and sums in bf16 for
// bf16), i.e. what plain PyTorch code in that dtype makes, and eps is the dtype's machine epsilon (bf16 2^-7,
// fp16 2^-10, fp32 2^-23, fp64 2^-52): the rule of flash-attention's tests and of
// tests/python/test_attention_cuda*.py, with a floor for sums that happen to be exact. fp64 has no wider type
// to measure its own rounding against (err(low) is 0), so its floor grows as summed rounding errors do, by
// sqrt(S + B). A fused op that throws fails the check. Measured on the CPU (fused, then the low reference, in
// units of eps * max|x64|, S 64-4096, D 64-256, windows): bf16 0.25-0.45 vs 0.5-1.0, fp32 2-8 vs 1.5-8,
// fp64 1-7.3; the test-only fault (9/8 x the output) is 16 such units in bf16.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include "attention_backend.h"
#include "selfcheck_tolerance.h"

namespace dflash::ops {

struct AttentionCheckSpec {
  at::Device device = at::kCPU;
  at::ScalarType dtype = at::kFloat;
  int64_t context_len = 256;  // S
  int64_t q_heads = 8, kv_heads = 2, head_dim = 64, block_size = 16;
  int64_t window = 0;         // 0: full attention
  int64_t num_blocks = 6;     // per batch row, at least 6 (the edge cases above)
  bool packed = false;        // blocks get ctx_start (packed rows)
  bool backward = true;       // also check dq, dk, dv
  int64_t timing_reps = 0;    // > 0: time each backend this many more times (median); 0: time the checked call
  uint64_t seed = 0;
  // "cpu fp32, S 256, Hq 8, Hkv 2, D 64, B 16, window 0, packed, forward+backward" (", N 512" after B when
  // num_blocks is not 6)
  std::string describe() const;
};

struct AttentionCheckResult {
  AttentionCheckSpec spec;
  bool passed = false;
  std::string exception;            // first line of what the fused op threw; empty when it ran
  std::string reference_exception;  // the same for the reference (then nothing can run there)
  std::vector<TensorCheck> tensors;
  double fused_ms = -1, reference_ms = -1;  // forward (+ backward) of the check's batch
  // One line: "dk max error 3.1e-01 > tolerance 2.4e-02", "threw: <first line>", or "max error 1.2e-07 of
  // tolerance 2.3e-06 (out)" for the tensor closest to its tolerance.
  std::string summary() const;
};

AttentionCheckResult check_fused_attention(const AttentionCheckSpec& spec);

// The shapes to check for a run: one spec per distinct window of its layers, all else shared.
std::vector<AttentionCheckSpec> specs_for_windows(const AttentionCheckSpec& base, const std::vector<int64_t>& windows);

// What a run uses on one device, chosen from what it asked for:
//   reference  the reference, no check;
//   fused      the fused op when every spec passes, else an std::runtime_error naming the device, the shape and
//              the figures (or the exception);
//   auto       the fused op when every spec passes, else the reference.
// `line` says it in one line for the run log (the fallback line names the device, the figures and the fallback).
struct AttentionChoice {
  AttentionBackend requested = AttentionBackend::Auto;
  AttentionBackend backend = AttentionBackend::Fused;  // Fused or Reference
  std::string device;
  std::vector<AttentionCheckResult> checks;           // in spec order, up to the first failure
  std::string line;
  bool fell_back() const { return requested == AttentionBackend::Auto && backend == AttentionBackend::Reference; }
};
AttentionChoice choose_attention_backend(AttentionBackend requested, const std::vector<AttentionCheckSpec>& specs);

// For calls that carry `auto` or `fused` themselves (the Python package, C++ callers passing Auto): the check
// runs once per process for each device, dtype, head counts, head_dim, block size, window, packed and backward
// (at the first call's S, at least 256), and the answer is remembered. auto falls back with one warning
// (TORCH_WARN; the Python package, through torch.ops.dflash.attention_backend_for, raises a RuntimeWarning
// itself); fused throws the check's message on every call. Thread-safe.
AttentionBackend resolve_attention_backend(AttentionBackend requested, const at::Tensor& q, const at::Tensor& k,
                                           int64_t block_size, int64_t window, bool packed, bool backward);

}  // namespace dflash::ops
