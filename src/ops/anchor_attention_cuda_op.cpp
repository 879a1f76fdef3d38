// CUDA implementations of dflash::anchor_block_attention_{fwd,bwd}: checks, the device-side plan and
// the kernels of src/kernels/cuda on the current stream. Extra memory is O(N*B) (LSE, delta, an fp32
// dQ accumulator cut into chunks, and the plan), never S x (N*B). Never waits for the GPU: the anchors'
// range check runs in the plan kernel and is read back by a later call.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <limits>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <tuple>

#include <ATen/Context.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/full.h>
#include <ATen/ops/zeros.h>
#include <c10/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include "anchor_attention.h"
#include "anchor_attention_checks.h"
#include "anchor_attention_cuda.cuh"
#include "cuda_build_info.h"
#include "cuda_device_report.h"

namespace dflash::ops {
namespace {

namespace kc = kernels::cuda;

void check_cuda(const at::Tensor& q, const kernels::AnchorAttentionArgs& a) {
  TORCH_CHECK(q.is_cuda(), "anchor_block_attention (CUDA): q must be a CUDA tensor, got ", q.device());
  TORCH_CHECK(q.scalar_type() == at::kBFloat16 || q.scalar_type() == at::kHalf,
              "anchor_block_attention (CUDA): dtype must be bfloat16 or float16, got ", q.scalar_type(),
              " (use the CPU op for float32/float64)");
  const char* why = kc::anchor_attention_cuda_unsupported(a.shape);
  TORCH_CHECK(why == nullptr, "anchor_block_attention (CUDA): ", why ? why : "", " (got head_dim ", a.shape.head_dim,
              ", q heads ", a.shape.q_heads, ", kv heads ", a.shape.kv_heads, ", S ", a.shape.context_len, ", N*B ",
              a.shape.num_blocks * a.shape.block_size, ")");
}

// cudaGetLastError is per host thread and sticky until read: an error left by earlier work (another op, a
// failed launch elsewhere) would otherwise surface after our launches and read as ours.
void check_no_earlier_error() {
  const cudaError_t err = cudaGetLastError();
  TORCH_CHECK(err == cudaSuccess, "anchor_block_attention (CUDA): a CUDA error from earlier work on this thread was "
              "pending before this op launched anything: ", cudaGetErrorString(err),
              " (not raised by this op; CUDA_LAUNCH_BLOCKING=1 shows where it came from)");
}

void cuda_ok(cudaError_t err, const char* what) {
  TORCH_CHECK(err == cudaSuccess, "anchor_block_attention (CUDA): ", what, " failed: ", cudaGetErrorString(err));
}

// ---- per device: shared memory, tile configurations, pending range checks -----------------------------
// One record per device for the life of the process; the mutex guards everything in it.
struct PendingCheck {
  at::Tensor host;  // pinned copy of the plan kernel's status words
  c10::cuda::CUDAEvent copied;
  kernels::AnchorAttentionShape shape;
  bool anchors_batched = false, ctx_start_batched = false;
};
struct DeviceState {
  std::mutex m;
  int64_t optin = 0, limit = 0;  // bytes of shared memory per block: the device's, and the one used
  std::string name;              // "cuda:0 (NVIDIA H100 80GB HBM3, sm_90)"
  std::map<std::tuple<int, int, int>, const kc::TileConfig*> chosen;  // (kernel, head_dim, dtype)
  std::deque<PendingCheck> pending;
};
constexpr size_t kMaxPendingChecks = 256;  // beyond this, wait for the oldest instead of piling up

// DFLASH_CUDA_SMEM_LIMIT caps every device's limit, for tests and diagnostics: the small-memory configurations
// on a large GPU. 0 when unset.
int64_t smem_cap() {
  std::string error;
  int64_t cap = 0;
  try {
    cap = kc::smem_limit_switch();
  } catch (const std::invalid_argument& e) {
    error = e.what();
  }
  TORCH_CHECK(error.empty(), error);
  return cap;
}

DeviceState& device_state(int index) {
  const int64_t cap = smem_cap();
  static std::mutex m;
  static std::map<int, DeviceState> states;  // nodes are stable: references stay valid
  std::lock_guard<std::mutex> lock(m);
  auto [it, fresh] = states.try_emplace(index);
  DeviceState& d = it->second;
  if (fresh) {
    int optin = 0, major = 0, minor = 0;
    cuda_ok(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, index), "shared memory query");
    cuda_ok(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, index), "capability query");
    cuda_ok(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, index), "capability query");
    cudaDeviceProp prop{};
    cuda_ok(cudaGetDeviceProperties(&prop, index), "device query");
    d.name = "cuda:" + std::to_string(index) + " (" + prop.name + ", sm_" + std::to_string(major * 10 + minor) + ")";
    d.optin = optin;
    d.limit = cap > 0 ? std::min<int64_t>(cap, optin) : optin;
  }
  return d;
}

std::string limit_note(const DeviceState& d) {
  return d.limit < d.optin ? " (capped by DFLASH_CUDA_SMEM_LIMIT; the device allows " + std::to_string(d.optin) + ")"
                           : std::string();
}

// The fastest configuration of `k` that fits the device, chosen once per (device, kernel, head_dim, dtype).
const kc::TileConfig& tile_for(kc::TileKernel k, const kernels::AnchorAttentionShape& s, DeviceState& d) {
  std::lock_guard<std::mutex> lock(d.m);
  const auto key = std::make_tuple(int(k), int(s.head_dim), int(s.dtype));
  if (auto it = d.chosen.find(key); it != d.chosen.end()) return *it->second;
  const kc::StaticSmem static_smem = [&](const kc::TileConfig& c) {
    int64_t bytes = 0;
    const cudaError_t err = kc::anchor_attention_cuda_static_smem(c, s.dtype, &bytes);
    // The failed query is this op's own error, raised below: left pending, the next call would report it as an
    // error "from earlier work" instead of naming the missing kernel image again.
    if (err != cudaSuccess) (void)cudaGetLastError();
    TORCH_CHECK(err == cudaSuccess, "anchor_block_attention (CUDA): cannot use the kernels on ", d.name, ": ",
                cudaGetErrorString(err), "; this build holds code for ", kernels::cuda_compiled_archs(),
                " (rebuild with DFLASH_CUDA_ARCHS naming this GPU's architecture, README \"CUDA architectures\")");
    return bytes;
  };
  const kc::TileConfig* c = kc::choose_tile_config(k, int(s.head_dim), d.limit, static_smem);
  TORCH_CHECK(c != nullptr, "anchor_block_attention (CUDA): ",
              kc::no_tile_fits(k, int(s.head_dim), d.limit, static_smem, d.name), limit_note(d));
  d.chosen.emplace(key, c);
  return *c;
}

// Reads the range checks of earlier forwards on this device that the GPU has finished (all of them once more
// than kMaxPendingChecks wait) and raises for the first one that found anchors or ctx_start outside [0, S].
void report_earlier_anchor_checks(DeviceState& d) {
  std::string bad;
  {
    std::lock_guard<std::mutex> lock(d.m);
    while (!d.pending.empty() && bad.empty()) {
      PendingCheck& c = d.pending.front();
      if (d.pending.size() <= kMaxPendingChecks && !c.copied.query()) break;
      c.copied.synchronize();
      uint64_t status[kc::kAnchorStatusWords];
      std::memcpy(status, c.host.data_ptr(), sizeof(status));
      bad = kc::describe_anchor_status(status, c.shape, c.anchors_batched, c.ctx_start_batched);
      d.pending.pop_front();
    }
  }
  TORCH_CHECK(bad.empty(), "anchor_block_attention (CUDA): in an earlier call on ", d.name, ", ", bad,
              "; that call computed with them clamped to [0, S] (the range is checked on the GPU and reported by "
              "the first call after the GPU ran the check, so that no call waits for the GPU)");
}

struct DevicePlan {
  at::Tensor order, sorted_anchor, nkept, status;
  kc::AnchorAttentionCudaPlan view() const {
    return {order.data_ptr<int32_t>(), sorted_anchor.data_ptr<int32_t>(), nkept.data_ptr<int32_t>(),
            status.defined() ? reinterpret_cast<uint64_t*>(status.data_ptr<int64_t>()) : nullptr};
  }
};

DevicePlan make_plan(const kernels::AnchorAttentionArgs& args, const at::Tensor& q, cudaStream_t stream,
                     bool check_range) {
  const auto opts = q.options().dtype(at::kInt);
  const int64_t n = args.shape.batch * args.shape.num_blocks;
  DevicePlan p{at::empty({n}, opts), at::empty({n}, opts), at::empty({args.shape.batch}, opts), {}};
  if (check_range) p.status = at::zeros({kc::kAnchorStatusWords}, q.options().dtype(at::kLong));
  cuda_ok(kc::anchor_attention_cuda_plan(args, p.view(), stream), "plan kernel launch");
  return p;
}

// Copies the plan's status to pinned memory behind the plan kernel; a later call reads it.
void queue_anchor_check(DeviceState& d, const DevicePlan& plan, const kernels::AnchorAttentionArgs& args,
                        const at::Tensor& anchors, const at::Tensor& ctx_start,
                        const c10::cuda::CUDAStream& stream) {
  PendingCheck c;
  c.host = at::empty({kc::kAnchorStatusWords}, at::TensorOptions().dtype(at::kLong).pinned_memory(true));
  c.host.copy_(plan.status, /*non_blocking=*/true);
  c.copied.record(stream);
  c.shape = args.shape;
  c.anchors_batched = anchors.dim() == 2;
  c.ctx_start_batched = ctx_start.defined() && ctx_start.dim() == 2;
  std::lock_guard<std::mutex> lock(d.m);
  d.pending.push_back(std::move(c));
}

}  // namespace

std::tuple<at::Tensor, at::Tensor> anchor_attention_fwd_cuda(const at::Tensor& q_in, const at::Tensor& k_in,
                                                              const at::Tensor& v_in, const at::Tensor& anchors,
                                                              const at::Tensor& keep, int64_t block_size,
                                                              int64_t window, double scale,
                                                              const std::optional<at::Tensor>& ctx_start_opt) {
  const at::Tensor ctx_start = ctx_start_or_undefined(ctx_start_opt);
  const AttentionDims d = check_attention_args(q_in, k_in, v_in, anchors, keep, block_size, window, ctx_start);
  const c10::cuda::CUDAGuard guard(q_in.device());
  check_no_earlier_error();
  DeviceState& dev = device_state(q_in.device().index());
  report_earlier_anchor_checks(dev);
  const at::Tensor q = cuda_aligned_rows(q_in), k = cuda_aligned_rows(k_in), v = cuda_aligned_rows(v_in);
  auto args = make_kernel_args(d, q, k, v, anchors, keep, window, scale, ctx_start);
  check_cuda(q, args);
  const kc::TileConfig& fwd = tile_for(kc::TileKernel::Forward, args.shape, dev);

  at::Tensor out = at::zeros(q.sizes(), q.options());
  at::Tensor lse = at::full({d.batch, d.q_heads, d.num_blocks * d.block_size},
                            -std::numeric_limits<double>::infinity(), q.options().dtype(at::kFloat));
  args.out = {out.data_ptr(), out.stride(0), out.stride(1), out.stride(2)};
  args.lse = lse.data_ptr();
  const c10::cuda::CUDAStream stream = c10::cuda::getCurrentCUDAStream(q.device().index());
  const DevicePlan plan = make_plan(args, q, stream.stream(), /*check_range=*/true);
  queue_anchor_check(dev, plan, args, anchors, ctx_start, stream);
  cuda_ok(kc::anchor_attention_cuda_forward(args, plan.view(), fwd, stream.stream()), "forward kernel launch");
  return {out, lse};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> anchor_attention_bwd_cuda(
    const at::Tensor& dout_in, const at::Tensor& q_in, const at::Tensor& k_in, const at::Tensor& v_in,
    const at::Tensor& out_in, const at::Tensor& lse, const at::Tensor& anchors, const at::Tensor& keep,
    int64_t block_size, int64_t window, double scale, const std::optional<at::Tensor>& ctx_start_opt) {
  const at::Tensor ctx_start = ctx_start_or_undefined(ctx_start_opt);
  const AttentionDims d = check_attention_args(q_in, k_in, v_in, anchors, keep, block_size, window, ctx_start);
  const c10::cuda::CUDAGuard guard(q_in.device());
  TORCH_CHECK(dout_in.sizes() == q_in.sizes() && out_in.sizes() == q_in.sizes(),
              "anchor_block_attention_bwd: dout and out must have the shape of q ", q_in.sizes());
  TORCH_CHECK(dout_in.device() == q_in.device() && out_in.device() == q_in.device() && lse.device() == q_in.device(),
              "anchor_block_attention_bwd: dout, out and lse must be on ", q_in.device());
  check_saved_lse(lse, d, at::kFloat);
  check_no_earlier_error();
  DeviceState& dev = device_state(q_in.device().index());
  report_earlier_anchor_checks(dev);
  const at::Tensor q = cuda_aligned_rows(q_in), k = cuda_aligned_rows(k_in), v = cuda_aligned_rows(v_in);
  const at::Tensor dout =
      cuda_aligned_rows(dout_in.scalar_type() == q.scalar_type() ? dout_in : dout_in.to(q.scalar_type()));
  const at::Tensor o = out_in.scalar_type() == q.scalar_type() && out_in.stride(3) == 1
                           ? out_in
                           : out_in.to(q.scalar_type()).contiguous();
  auto args = make_kernel_args(d, q, k, v, anchors, keep, window, scale, ctx_start);
  check_cuda(q, args);
  // Anchors and ctx_start were range-checked by the forward; the kernels clamp them to [0, S], so a direct
  // call with bad values stays in bounds.

  // torch.use_deterministic_algorithms(True): dQ summed per row tile in a fixed order instead of fp32 atomics.
  const bool deterministic = at::globalContext().deterministicAlgorithms();
  kc::BackwardPlan w;
  w.bwd = &tile_for(kc::TileKernel::Backward, args.shape, dev);
  w.dq = deterministic ? &tile_for(kc::TileKernel::DqRows, args.shape, dev) : nullptr;
  w.chunks = kc::plan_bwd_chunks(args.shape, deterministic);

  BackwardOutputs g = bind_backward_tensors(args, q, k, v, o, lse, dout);
  if (deterministic) g.dq.zero_();  // rows of dropped blocks are not written
  const auto fopts = q.options().dtype(at::kFloat);
  const at::Tensor delta = at::empty({std::max<int64_t>(1, w.chunks.delta_floats)}, fopts);
  const at::Tensor dq_acc = at::empty({std::max<int64_t>(1, w.chunks.dq_acc_floats)}, fopts);
  w.delta = delta.data_ptr<float>();
  w.dq_acc = dq_acc.data_ptr<float>();
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(q.device().index()).stream();
  const DevicePlan plan = make_plan(args, q, stream, /*check_range=*/false);
  cuda_ok(kc::anchor_attention_cuda_backward(args, plan.view(), w, stream), "backward kernel launch");
  return {g.dq, g.dk, g.dv};
}

CudaAttentionDevice cuda_attention_device(int index, const std::vector<int>& head_dims) {
  const c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(index));
  DeviceState& dev = device_state(index);
  CudaAttentionDevice out;
  out.smem_optin = dev.optin, out.smem_limit = dev.limit;
  for (const int head_dim : head_dims)
    for (const auto k : {kc::TileKernel::Forward, kc::TileKernel::Backward, kc::TileKernel::DqRows}) {
      CudaTileChoice c;
      c.kernel = kc::tile_kernel_name(k);
      c.head_dim = head_dim;
      kernels::AnchorAttentionShape shape;
      shape.head_dim = head_dim;
      shape.dtype = kernels::ScalarType::BFloat16;
      try {
        const kc::TileConfig& t = tile_for(k, shape, dev);
        int64_t static_bytes = 0;  // known to succeed: tile_for asked the same
        cuda_ok(kc::anchor_attention_cuda_static_smem(t, shape.dtype, &static_bytes), "kernel attribute query");
        c.keys = t.keys, c.stages = t.stages;
        c.smem_bytes = kc::tile_dynamic_smem(t) + static_bytes;
      } catch (const c10::Error& e) {
        c.error = e.what_without_backtrace();
        c.error = c.error.substr(0, c.error.find('\n'));
      }
      out.tiles.push_back(c);
    }
  return out;
}

TORCH_LIBRARY_IMPL(dflash, CUDA, m) {
  m.impl("anchor_block_attention_fwd", &anchor_attention_fwd_cuda);
  m.impl("anchor_block_attention_bwd", &anchor_attention_bwd_cuda);
}

}  // namespace dflash::ops
