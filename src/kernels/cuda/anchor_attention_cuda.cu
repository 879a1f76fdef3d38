// CUDA build of the anchor-block attention: tensor-core Elem<T> for bf16/fp16, the kernels of
// anchor_attention_cuda_kernels.cuh, and the host-side launchers declared in anchor_attention_cuda.cuh.
#include "anchor_attention_cuda.cuh"

#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "anchor_attention_cuda_kernels.cuh"

namespace dflash::kernels::cuda {
namespace {

// ---- 16-bit element types -------------------------------------------------------------------------
template <>
struct Elem<__nv_bfloat16> {
  static __device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
  static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);  // .x (lo) is the low half
    return *reinterpret_cast<const uint32_t*>(&v);
  }
  static __device__ __forceinline__ float to_float(uint16_t bits) {
    return __uint_as_float(uint32_t(bits) << 16);
  }
};
template <>
struct Elem<__half> {
  static __device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
  static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
    const __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  }
  static __device__ __forceinline__ float to_float(uint16_t bits) {
    return __half2float(__ushort_as_half(bits));
  }
};

// ---- host side -----------------------------------------------------------------------------------
template <typename T, int D, int BN>
cudaError_t launch_fwd(const Params& p, int batch, cudaStream_t stream) {
  constexpr int smem = fwd_smem_bytes<D, BN>();
  cudaError_t err = cudaFuncSetAttribute(fwd_kernel<T, D, BN>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (err != cudaSuccess) return err;
  const dim3 grid(unsigned(fwd_row_tiles(p)), unsigned(p.Hkv), unsigned(batch));
  fwd_kernel<T, D, BN><<<grid, kFwdThreads, smem, stream>>>(p);
  return cudaGetLastError();
}

template <typename T, int D>
cudaError_t launch_bwd(const Params& p, int batch, cudaStream_t stream) {
  constexpr int smem = bwd_smem_bytes<D>();
  cudaError_t err = cudaFuncSetAttribute(bwd_kernel<T, D>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (err != cudaSuccess) return err;
  const dim3 grid(unsigned(bwd_items(p, bwd_keys_per_tile<D>())), unsigned(p.Hkv), unsigned(batch));
  bwd_kernel<T, D><<<grid, kBwdThreads, smem, stream>>>(p);
  return cudaGetLastError();
}

template <typename T>
cudaError_t forward_t(const Params& p, int batch, int D, cudaStream_t stream) {
  switch (D) {
    case 64: return launch_fwd<T, 64, fwd_keys_per_tile<64>()>(p, batch, stream);
    case 128: return launch_fwd<T, 128, fwd_keys_per_tile<128>()>(p, batch, stream);
    case 256: return launch_fwd<T, 256, fwd_keys_per_tile<256>()>(p, batch, stream);
  }
  return cudaErrorInvalidValue;
}

template <typename T>
cudaError_t backward_t(const Params& p, const AnchorAttentionArgs& a, cudaStream_t stream) {
  const AnchorAttentionShape& s = a.shape;
  const int D = int(s.head_dim);
  const int64_t rows = s.batch * s.q_heads * s.num_blocks * s.block_size;
  if (rows > 0) {
    delta_kernel<T><<<unsigned((rows + kDeltaWarps - 1) / kDeltaWarps), kDeltaWarps * 32, 0, stream>>>(p, D, rows);
    cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) return err;
  }
  cudaError_t err = cudaErrorInvalidValue;
  switch (D) {
    case 64: err = launch_bwd<T, 64>(p, int(s.batch), stream); break;
    case 128: err = launch_bwd<T, 128>(p, int(s.batch), stream); break;
    case 256: err = launch_bwd<T, 256>(p, int(s.batch), stream); break;
  }
  if (err != cudaSuccess) return err;
  const int64_t total = rows * D;
  if (total > 0) {
    const int64_t blocks = (total + kConvertThreads - 1) / kConvertThreads;
    dq_convert_kernel<T><<<unsigned(blocks < 65536 ? blocks : 65536), kConvertThreads, 0, stream>>>(
        p, D, static_cast<uint16_t*>(a.dq.data), str_of(a.dq), total);
    err = cudaGetLastError();
  }
  return err;
}

bool aligned16(const void* ptr, const Str& st) {
  return (reinterpret_cast<uintptr_t>(ptr) % 16 == 0) && st.sb % 8 == 0 && st.st % 8 == 0 && st.sh % 8 == 0;
}

}  // namespace

const char* anchor_attention_cuda_unsupported(const AnchorAttentionShape& s) {
  if (s.dtype != ScalarType::BFloat16 && s.dtype != ScalarType::Float16)
    return "dtype must be bfloat16 or float16";
  if (s.head_dim != 64 && s.head_dim != 128 && s.head_dim != 256) return "head_dim must be 64, 128 or 256";
  if (s.kv_heads < 1 || s.q_heads % s.kv_heads != 0) return "q heads must be a multiple of kv heads";
  if (s.block_size < 1) return "block_size must be >= 1";
  if (s.context_len + s.num_blocks * s.block_size >= (int64_t(1) << 30) ||
      s.num_blocks * s.block_size * s.q_heads >= (int64_t(1) << 30))
    return "sequence too long for 32-bit token indices";
  if (s.batch > 65535 || s.kv_heads > 65535) return "batch and kv heads must be <= 65535";
  return nullptr;
}

int64_t anchor_attention_cuda_delta_numel(const AnchorAttentionShape& s) {
  return s.batch * s.q_heads * s.num_blocks * s.block_size;
}
int64_t anchor_attention_cuda_dq_acc_numel(const AnchorAttentionShape& s) {
  return anchor_attention_cuda_delta_numel(s) * s.head_dim;
}

cudaError_t anchor_attention_cuda_plan(const AnchorAttentionArgs& a, const AnchorAttentionCudaPlan& p,
                                       cudaStream_t stream) {
  const AnchorAttentionShape& s = a.shape;
  if (s.batch == 0 || s.num_blocks == 0) return cudaSuccess;
  const dim3 grid(unsigned((s.num_blocks + kPlanThreads - 1) / kPlanThreads), unsigned(s.batch));
  plan_kernel<<<grid, kPlanThreads, 0, stream>>>(a.anchors, a.anchors_sb, a.keep, a.keep_sb, int(s.num_blocks),
                                            int(s.context_len), p.order, p.sorted_anchor, p.nkept);
  return cudaGetLastError();
}

cudaError_t anchor_attention_cuda_forward(const AnchorAttentionArgs& a, const AnchorAttentionCudaPlan& pl,
                                          cudaStream_t stream) {
  const AnchorAttentionShape& s = a.shape;
  if (anchor_attention_cuda_unsupported(s)) return cudaErrorInvalidValue;
  if (s.batch == 0 || s.num_blocks == 0 || s.q_heads == 0) return cudaSuccess;
  const Params p = make_params(a, pl.order, pl.sorted_anchor, pl.nkept);
  if (!aligned16(p.q, p.qs) || !aligned16(p.k, p.ks) || !aligned16(p.v, p.vs)) return cudaErrorMisalignedAddress;
  const int D = int(s.head_dim);
  return s.dtype == ScalarType::BFloat16 ? forward_t<__nv_bfloat16>(p, int(s.batch), D, stream)
                                         : forward_t<__half>(p, int(s.batch), D, stream);
}

cudaError_t anchor_attention_cuda_backward(const AnchorAttentionArgs& a, const AnchorAttentionCudaPlan& pl,
                                           float* delta, float* dq_acc, cudaStream_t stream) {
  const AnchorAttentionShape& s = a.shape;
  if (anchor_attention_cuda_unsupported(s)) return cudaErrorInvalidValue;
  if (s.batch == 0 || s.num_blocks == 0 || s.q_heads == 0) return cudaSuccess;
  Params p = make_params(a, pl.order, pl.sorted_anchor, pl.nkept);
  p.delta = delta;
  p.dq_acc = dq_acc;
  if (!aligned16(p.q, p.qs) || !aligned16(p.k, p.ks) || !aligned16(p.v, p.vs) || !aligned16(p.dout, p.dos))
    return cudaErrorMisalignedAddress;
  return s.dtype == ScalarType::BFloat16 ? backward_t<__nv_bfloat16>(p, a, stream)
                                         : backward_t<__half>(p, a, stream);
}

}  // namespace dflash::kernels::cuda
