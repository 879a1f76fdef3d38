// CUDA build of the anchor-block attention: tensor-core Elem<T> for bf16/fp16, the kernels of
// anchor_attention_cuda_kernels.cuh launched through anchor_attention_cuda_launch.cuh, and the entry points
// declared in anchor_attention_cuda.cuh.
#include "anchor_attention_cuda.cuh"

#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "anchor_attention_cuda_launch.cuh"

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
// Launches on one stream; keeps the first error.
struct CudaLauncher {
  cudaStream_t stream;
  cudaError_t err = cudaSuccess;

  template <typename A>
  bool launch(void (*kernel)(A), dim3 grid, unsigned threads, int64_t smem, const A& args) {
    if (grid.x == 0 || grid.y == 0 || grid.z == 0) return true;
    const void* fn = reinterpret_cast<const void*>(kernel);
    err = cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
    if (err == cudaSuccess) {
      void* argv[] = {const_cast<A*>(&args)};
      err = cudaLaunchKernel(fn, grid, dim3(threads), argv, size_t(smem), stream);
    }
    if (err != cudaSuccess) cudaGetLastError();  // reported through err; do not leave it for the next caller
    return err == cudaSuccess;
  }
  bool zero(void* ptr, int64_t bytes) {
    err = cudaMemsetAsync(ptr, 0, size_t(bytes), stream);
    return err == cudaSuccess;
  }
};

bool bf16(const AnchorAttentionShape& s) { return s.dtype == ScalarType::BFloat16; }

}  // namespace

cudaError_t anchor_attention_cuda_plan(const AnchorAttentionArgs& a, const AnchorAttentionCudaPlan& p,
                                       cudaStream_t stream) {
  CudaLauncher l{stream};
  launch_plan(l, a, p);
  return l.err;
}

cudaError_t anchor_attention_cuda_forward(const AnchorAttentionArgs& a, const AnchorAttentionCudaPlan& p,
                                          const TileConfig& fwd, cudaStream_t stream) {
  if (anchor_attention_cuda_unsupported(a.shape) || fwd.kernel != TileKernel::Forward ||
      fwd.head_dim != a.shape.head_dim)
    return cudaErrorInvalidValue;
  if (!operands_aligned16(a, false)) return cudaErrorMisalignedAddress;
  CudaLauncher l{stream};
  bf16(a.shape) ? launch_forward<__nv_bfloat16>(l, a, p, fwd) : launch_forward<__half>(l, a, p, fwd);
  return l.err;
}

cudaError_t anchor_attention_cuda_backward(const AnchorAttentionArgs& a, const AnchorAttentionCudaPlan& p,
                                           const BackwardPlan& w, cudaStream_t stream) {
  if (anchor_attention_cuda_unsupported(a.shape) || !w.bwd || w.bwd->head_dim != a.shape.head_dim ||
      (w.dq && w.dq->head_dim != a.shape.head_dim))
    return cudaErrorInvalidValue;
  if (!operands_aligned16(a, true)) return cudaErrorMisalignedAddress;
  CudaLauncher l{stream};
  bf16(a.shape) ? launch_backward<__nv_bfloat16>(l, a, p, w) : launch_backward<__half>(l, a, p, w);
  return l.err;
}

cudaError_t anchor_attention_cuda_static_smem(const TileConfig& c, ScalarType dtype, int64_t* bytes) {
  const Kernel k = dtype == ScalarType::BFloat16 ? kernel_for<__nv_bfloat16>(c) : kernel_for<__half>(c);
  if (!k) return cudaErrorInvalidValue;
  cudaFuncAttributes attr{};
  const cudaError_t err = cudaFuncGetAttributes(&attr, reinterpret_cast<const void*>(k));
  if (err != cudaSuccess) {
    cudaGetLastError();
    return err;
  }
  *bytes = int64_t(attr.sharedSizeBytes);
  return cudaSuccess;
}

}  // namespace dflash::kernels::cuda
