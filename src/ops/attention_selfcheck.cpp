#include "attention_selfcheck.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <map>
#include <mutex>
#include <tuple>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include "anchor_attention_op.h"
#include "anchor_attention_reference.h"

namespace dflash::ops {
namespace {

// A device without an index means the current one (timings and checks run there).
at::Device concrete(at::Device d) {
  if (d.is_cpu() || d.has_index()) return d;
  return c10::impl::VirtualGuardImpl(d.type()).getDevice();
}

void sync(const at::Device& d) {
  if (!d.is_cpu()) c10::impl::VirtualGuardImpl(d.type()).synchronizeDevice(d.index());
}

struct CheckInputs {
  at::Tensor q, k, v, dout, anchors, keep, ctx_start;
};

CheckInputs make_inputs(const AttentionCheckSpec& s) {
  const int64_t S = s.context_len, B = s.block_size, N = s.num_blocks, T = N * B;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(s.seed);
  const auto draw = [&](std::initializer_list<int64_t> shape) {
    return at::randn(shape, gen, at::TensorOptions().dtype(at::kDouble)).to(s.dtype).to(s.device);
  };
  CheckInputs in;
  in.q = draw({2, T, s.q_heads, s.head_dim});
  in.k = draw({2, S + T, s.kv_heads, s.head_dim});
  in.v = draw({2, S + T, s.kv_heads, s.head_dim});
  in.dout = draw({2, T, s.q_heads, s.head_dim});
  // Row 0: no context, one key, half, all, a third and a dropped block at S; row 1 another order; then the
  // blocks beyond 6 spread over [0, S].
  std::vector<int64_t> a, keep;
  const std::vector<int64_t> edge[2] = {{0, 1, S / 2, S, S, S / 3}, {S, S / 4, 0, 2 * S / 3, 1, std::max<int64_t>(0, S - 1)}};
  const std::vector<int64_t> edge_keep[2] = {{1, 1, 1, 1, 0, 1}, {1, 1, 1, 1, 1, 0}};
  for (int row = 0; row < 2; ++row) {
    a.insert(a.end(), edge[row].begin(), edge[row].end());
    keep.insert(keep.end(), edge_keep[row].begin(), edge_keep[row].end());
    for (int64_t n = 6; n < N; ++n) {
      const int64_t spread = S * (n - 6) / std::max<int64_t>(1, N - 7);
      a.push_back(row == 0 ? spread : S - spread);
      keep.push_back(1);
    }
  }
  for (auto& x : a) x = std::min(x, S);
  const auto longs = at::TensorOptions().dtype(at::kLong);
  in.anchors = at::tensor(a, longs).view({2, N}).to(s.device);
  in.keep = at::tensor(keep, longs).view({2, N}).to(at::kBool).to(s.device);
  if (s.packed) {  // each block sees only its document: documents start at 0, S/4, S/2, 3S/4
    std::vector<int64_t> starts;
    for (const int64_t x : a) {
      int64_t doc = 0;
      for (const int64_t d : {S / 4, S / 2, 3 * S / 4})
        if (d <= x) doc = d;
      starts.push_back(doc);
    }
    in.ctx_start = at::tensor(starts, longs).view({2, N}).to(s.device);
  }
  return in;
}

// out (and dq, dk, dv) of one implementation on the check's batch.
using Impl = std::function<std::vector<at::Tensor>(const CheckInputs&)>;

Impl fused_impl(const AttentionCheckSpec& s, double scale) {
  return [=](const CheckInputs& in) {
    auto [out, lse] =
        anchor_block_attention_fwd(in.q, in.k, in.v, in.anchors, in.keep, s.block_size, s.window, scale, in.ctx_start);
    if (!s.backward) return std::vector<at::Tensor>{out};
    auto [dq, dk, dv] = anchor_block_attention_bwd(in.dout, in.q, in.k, in.v, out, lse, in.anchors, in.keep,
                                                   s.block_size, s.window, scale, in.ctx_start);
    return std::vector<at::Tensor>{out, dq, dk, dv};
  };
}

Impl reference_impl(const AttentionCheckSpec& s, double scale, bool in_input_dtype) {
  return [=](const CheckInputs& in) {
    auto [out, lse] = anchor_attention_reference_fwd(in.q, in.k, in.v, in.anchors, in.keep, s.block_size, s.window,
                                                     scale, in.ctx_start, 0, in_input_dtype);
    if (!s.backward) return std::vector<at::Tensor>{out};
    auto [dq, dk, dv] = anchor_attention_reference_bwd(in.dout, in.q, in.k, in.v, out, lse, in.anchors, in.keep,
                                                       s.block_size, s.window, scale, in.ctx_start, 0, in_input_dtype);
    return std::vector<at::Tensor>{out, dq, dk, dv};
  };
}

// Runs `impl` once (and `reps` more times for timing); its results and the median wall time in ms.
std::vector<at::Tensor> run_timed(const Impl& impl, const CheckInputs& in, int64_t reps, double& ms) {
  using Clock = std::chrono::steady_clock;
  std::vector<double> times;
  std::vector<at::Tensor> out;
  for (int64_t r = 0; r <= reps; ++r) {
    sync(in.q.device());
    const auto t0 = Clock::now();
    out = impl(in);
    sync(in.q.device());
    times.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  if (reps > 0) times.erase(times.begin());  // the first call warms up
  std::sort(times.begin(), times.end());
  ms = times[times.size() / 2];
  return out;
}

}  // namespace

std::string AttentionCheckSpec::describe() const {
  char blocks[32] = "";
  if (num_blocks != 6) std::snprintf(blocks, sizeof blocks, ", N %lld", (long long)num_blocks);
  char buf[240];
  std::snprintf(buf, sizeof buf, "%s %s, S %lld, Hq %lld, Hkv %lld, D %lld, B %lld%s, window %lld%s, %s",
                device.str().c_str(), short_dtype_name(dtype).c_str(), (long long)context_len, (long long)q_heads,
                (long long)kv_heads, (long long)head_dim, (long long)block_size, blocks, (long long)window,
                packed ? ", packed" : "", backward ? "forward+backward" : "forward");
  return buf;
}

std::string AttentionCheckResult::summary() const {
  if (!reference_exception.empty()) return "the reference threw: " + reference_exception;
  if (!exception.empty()) return "threw: " + exception;
  return worst_of(tensors);
}

AttentionCheckResult check_fused_attention(const AttentionCheckSpec& spec_in) {
  AttentionCheckResult r;
  r.spec = spec_in;
  r.spec.device = concrete(spec_in.device);
  const AttentionCheckSpec& s = r.spec;
  TORCH_CHECK(s.context_len >= 0 && s.q_heads >= 1 && s.kv_heads >= 1 && s.q_heads % s.kv_heads == 0 &&
                  s.head_dim >= 1 && s.block_size >= 1 && s.window >= 0 && s.num_blocks >= 6,
              "attention self-check: bad shape (", s.describe(), ")");
  at::NoGradGuard no_grad;
  const double scale = 1.0 / std::sqrt(double(s.head_dim));
  const bool low_is_reference = s.dtype == at::kFloat || s.dtype == at::kDouble;  // no narrower compute dtype
  CheckInputs in;
  std::vector<at::Tensor> exact, low, fused;
  try {  // inputs, the exact and the low-precision reference: a failure here means nothing can run on the device
    in = make_inputs(s);
    CheckInputs in64 = in;
    for (at::Tensor* t : {&in64.q, &in64.k, &in64.v, &in64.dout}) *t = t->to(at::kDouble);
    exact = reference_impl(s, scale, false)(in64);
    low = run_timed(reference_impl(s, scale, true), in, low_is_reference ? s.timing_reps : 0, r.reference_ms);
    if (!low_is_reference) run_timed(reference_impl(s, scale, false), in, s.timing_reps, r.reference_ms);
  } catch (const std::exception& e) {
    r.reference_exception = exception_first_line(e);
    return r;
  }
  try {
    fused = run_timed(fused_impl(s, scale), in, s.timing_reps, r.fused_ms);
  } catch (const std::exception& e) {
    r.exception = exception_first_line(e);
    return r;
  }
  static const char* names[] = {"out", "dq", "dk", "dv"};
  const double floor_growth = s.dtype == at::kDouble ? std::sqrt(double(s.context_len + s.block_size)) : 1.0;
  r.passed = true;
  for (size_t i = 0; i < exact.size(); ++i) {
    r.tensors.push_back(compare_to_exact(names[i], fused[i], low[i], exact[i], s.dtype, floor_growth));
    r.passed = r.passed && r.tensors.back().ok();
  }
  return r;
}

std::vector<AttentionCheckSpec> specs_for_windows(const AttentionCheckSpec& base, const std::vector<int64_t>& windows) {
  std::vector<int64_t> w = windows;
  std::sort(w.begin(), w.end());
  w.erase(std::unique(w.begin(), w.end()), w.end());
  std::vector<AttentionCheckSpec> out;
  for (const int64_t x : w) {
    AttentionCheckSpec s = base;
    s.window = x;
    out.push_back(s);
  }
  return out;
}

AttentionChoice choose_attention_backend(AttentionBackend requested, const std::vector<AttentionCheckSpec>& specs) {
  AttentionChoice c;
  c.requested = requested;
  c.device = specs.empty() ? "?" : concrete(specs[0].device).str();
  if (requested == AttentionBackend::Reference) {
    c.backend = AttentionBackend::Reference;
    c.line = "attention: " + c.device + ": reference (attention_backend reference, no self-check)";
    return c;
  }
  TORCH_CHECK(!specs.empty(), "attention self-check: no shapes to check");
  for (const auto& spec : specs) {
    c.checks.push_back(check_fused_attention(spec));
    const AttentionCheckResult& r = c.checks.back();
    if (r.passed) continue;
    const std::string why = r.spec.describe() + ": " + r.summary();
    // The reference itself could not run (out of memory, a device error): falling back to it would fail the same
    // way, so say that instead of blaming the fused op.
    if (!r.reference_exception.empty())
      throw std::runtime_error("attention self-check on " + c.device + ": the reference attention itself failed (" +
                               why + "), so neither backend can run this shape on " + c.device +
                               " (attention_backend " + attention_backend_name(requested) +
                               "); free memory on the device or lower max_len / batch_size");
    if (requested == AttentionBackend::Fused)
      throw std::runtime_error("attention_backend fused: the fused attention failed its self-check against the "
                               "reference on " + c.device + " (" + why +
                               "); use attention_backend auto (falls back to the reference) or reference");
    c.backend = AttentionBackend::Reference;
    c.line = "attention: " + c.device + ": the fused op failed its self-check (" + why +
             "); falling back to the reference attention on " + c.device;
    return c;
  }
  c.backend = AttentionBackend::Fused;
  std::string figures;
  for (const auto& r : c.checks)
    figures += (figures.empty() ? "" : "; ") + std::string(r.spec.window > 0 ? "window " + std::to_string(r.spec.window) : "full") +
               " " + r.summary();
  c.line = "attention: " + c.device + ": fused (self-check against the reference passed: " + figures + ")";
  return c;
}

namespace {

// resolve_attention_backend without the warning: `fallback_line` is set on the one call that decided to fall back.
AttentionBackend resolve_quietly(AttentionBackend requested, const at::Tensor& q, const at::Tensor& k,
                                 int64_t block_size, int64_t window, bool packed, bool backward,
                                 std::string& fallback_line) {
  if (requested == AttentionBackend::Reference) return requested;
  // Shapes the op itself refuses: let it say why.
  if (q.dim() != 4 || k.dim() != 4 || k.size(2) < 1 || q.size(2) % k.size(2) != 0 || block_size < 1 || window < 0 ||
      !at::isFloatingType(q.scalar_type()) || k.size(1) < q.size(1))
    return AttentionBackend::Fused;
  using Key = std::tuple<std::string, int, int64_t, int64_t, int64_t, int64_t, int64_t, bool, bool>;
  struct Decision {
    AttentionBackend backend;
    std::string line;
  };
  static std::mutex mu;
  static std::map<Key, Decision> decided;
  const at::Device dev = concrete(q.device());
  const Key key{dev.str(), int(q.scalar_type()), q.size(2), k.size(2), q.size(3), block_size, window, packed, backward};
  std::lock_guard<std::mutex> lock(mu);
  auto it = decided.find(key);
  if (it == decided.end()) {
    AttentionCheckSpec s;
    s.device = dev;
    s.dtype = q.scalar_type();
    s.context_len = std::max<int64_t>(256, k.size(1) - q.size(1));
    s.q_heads = q.size(2), s.kv_heads = k.size(2), s.head_dim = q.size(3), s.block_size = block_size;
    s.window = window, s.packed = packed, s.backward = backward;
    const AttentionChoice c = choose_attention_backend(AttentionBackend::Auto, {s});
    it = decided.emplace(key, Decision{c.backend, c.line}).first;
    if (c.fell_back() && requested == AttentionBackend::Auto) fallback_line = c.line;
  }
  TORCH_CHECK(requested != AttentionBackend::Fused || it->second.backend == AttentionBackend::Fused, "backend fused: ",
              it->second.line.substr(0, it->second.line.find("; falling back")),
              "; use backend auto (falls back to the reference) or reference");
  return it->second.backend;
}

// For the Python package's backend= argument: (backend, the fallback line when this call decided to fall back,
// which Python turns into a warning; a TORCH_WARN would not reach Python's warnings from a custom op).
std::tuple<std::string, std::string> attention_backend_for(const at::Tensor& q, const at::Tensor& k,
                                                           int64_t block_size, int64_t window, bool packed,
                                                           bool backward, const std::string& requested) {
  std::string line;
  const AttentionBackend b = resolve_quietly(parse_attention_backend(requested, "backend"), q, k, block_size, window,
                                             packed, backward, line);
  return {attention_backend_name(b), line};
}

}  // namespace

AttentionBackend resolve_attention_backend(AttentionBackend requested, const at::Tensor& q, const at::Tensor& k,
                                           int64_t block_size, int64_t window, bool packed, bool backward) {
  std::string line;
  const AttentionBackend b = resolve_quietly(requested, q, k, block_size, window, packed, backward, line);
  if (!line.empty()) TORCH_WARN(line);
  return b;
}

TORCH_LIBRARY_FRAGMENT(dflash, m) {
  m.def("attention_backend_for(Tensor q, Tensor k, int block_size, int window, bool packed, bool backward, "
        "str requested) -> (str, str)",
        &attention_backend_for);
}

}  // namespace dflash::ops
