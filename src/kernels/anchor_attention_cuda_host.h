// What the host decides for the CUDA anchor-block attention, without CUDA: the tile configurations the kernels
// are compiled for and the choice among them by shared memory per block, the backward's workspace and how it is
// cut into chunks, the 16-byte row alignment the kernels need and the range check the plan kernel does on the
// device. Plain C++ in every build: the CUDA launchers (src/kernels/cuda), their CPU emulation
// (tests/ops/cuda_emu) and the memory planner (src/drafter) share it, so all three agree.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "anchor_attention.h"

namespace dflash::kernels::cuda {

constexpr int kBM = 64;          // query rows per tile, every kernel
constexpr int kPad = 8;          // shared-memory row padding in elements: rows stay 16-byte aligned and the
                                 // fragment reads hit 32 distinct banks
constexpr int kFwdThreads = 128;  // forward and deterministic dQ: 4 warps x 16 rows
constexpr int kBwdThreads = 256;  // backward: 8 warps

// The static shared memory of each kernel (the bookkeeping of a 64-row tile), declared as these structs so that
// the host can count it too.
struct FwdRowsShared {
  int lo[kBM], hi[kBM], bhi[kBM], bi[kBM], tok[kBM], qh[kBM];
  int t_min, t_max;
};
struct DqRowsShared {
  FwdRowsShared rows;
  float lse[kBM], delta[kBM];
};
struct BwdRowsShared {
  int clo[kBM], chi[kBM], tok[kBM], qh[kBM];
  float lse[kBM], delta[kBM];
};

// Forward: O and LSE per row tile. Backward: dK, dV per key tile (and dQ by fp32 atomics unless deterministic).
// DqRows: the deterministic mode's dQ, per row tile, summed in registers.
enum class TileKernel { Forward, Backward, DqRows };
const char* tile_kernel_name(TileKernel k);

struct TileConfig {
  TileKernel kernel;
  int head_dim;
  int keys;    // keys per tile
  int stages;  // K/V tile buffers of the row-tile kernels: 2 loads the next tile while computing this one
};

// Dynamic shared memory of a configuration, bytes.
int64_t tile_dynamic_smem(const TileConfig& c);
// Its static shared memory as the structs above count it (the compiler's figure may be a little larger: the
// CUDA launcher asks cudaFuncGetAttributes instead).
int64_t tile_static_smem_estimate(TileKernel k);

// Every configuration the kernels are compiled for; per (kernel, head_dim) the fastest first (larger key tiles
// reload the rows' operands and add dQ less often; two stages hide the loads).
const std::vector<TileConfig>& tile_configs();

using StaticSmem = std::function<int64_t(const TileConfig&)>;

// The first configuration of (kernel, head_dim) whose dynamic + static shared memory fits `limit` bytes per block,
// or nullptr when none does.
const TileConfig* choose_tile_config(TileKernel k, int head_dim, int64_t limit, const StaticSmem& static_smem);

// The error when nothing fits: names the kernel, head_dim, `device` (e.g. "cuda:0 (NVIDIA L40S)"), the bytes it
// allows and the bytes the smallest configuration needs.
std::string no_tile_fits(TileKernel k, int head_dim, int64_t limit, const StaticSmem& static_smem,
                         const std::string& device);

// DFLASH_CUDA_SMEM_LIMIT: a positive byte count that caps the device's limit (to run the small-memory
// configurations on a large GPU). Returns false for anything else (empty, signs, units, zero).
bool parse_smem_limit(const char* text, int64_t& bytes);
// The switch itself, read from the environment here only: 0 when unset, else its bytes; a value parse_smem_limit
// refuses throws std::invalid_argument "DFLASH_CUDA_SMEM_LIMIT must be a positive number of bytes (e.g. 101376),
// got '<text>'".
int64_t smem_limit_switch();

// Why this shape cannot run on the GPU kernels (dtype, head dim, sizes), or nullptr when it can.
const char* anchor_attention_cuda_unsupported(const AnchorAttentionShape& s);

// Device buffers of the plan kernel, which the caller allocates (sizes in elements).
struct AnchorAttentionCudaPlan {
  int32_t* order = nullptr;          // [batch * N]: kept block indices sorted by anchor
  int32_t* sorted_anchor = nullptr;  // [batch * N]: their anchors, clamped to [0, S]
  int32_t* nkept = nullptr;          // [batch]
  uint64_t* status = nullptr;        // kAnchorStatusWords zeroed words for the range check, or null: none
};

// The backward's workspace: delta [rows] and, unless deterministic, the fp32 dQ accumulator [rows, D], for the
// rows of one chunk of (batch, KV head) pairs. Chunks keep the workspace under `bound_bytes` where a single
// (batch, KV head) pair allows it: whole batches of all heads when one batch fits, else runs of KV heads of one
// batch.
constexpr int64_t kDefaultBwdWorkspaceBytes = int64_t(1) << 30;
struct BwdChunks {
  int64_t batches = 0, kv_heads = 0;  // per chunk
  int64_t delta_floats = 0, dq_acc_floats = 0;  // workspace of one chunk
  int64_t count = 0;  // chunks in one backward call
  int64_t bytes() const { return 4 * (delta_floats + dq_acc_floats); }
};
BwdChunks plan_bwd_chunks(const AnchorAttentionShape& s, bool deterministic,
                          int64_t bound_bytes = kDefaultBwdWorkspaceBytes);

// What the backward launches: the dK/dV configuration, the deterministic dQ configuration (nullptr: dQ by fp32
// atomics into dq_acc), the chunks and one chunk's workspace.
struct BackwardPlan {
  const TileConfig* bwd = nullptr;
  const TileConfig* dq = nullptr;
  BwdChunks chunks;
  float* delta = nullptr;   // chunks.delta_floats
  float* dq_acc = nullptr;  // chunks.dq_acc_floats (zeroed per chunk by the launches)
};

// The kernels read rows of q, k, v and dout in 16-byte pieces: the data 16-byte aligned, and the stride of every
// dimension with more than one entry a multiple of 8 elements (a size-1 dimension's stride is never used).
bool rows_aligned16(const void* data, const int64_t (&sizes)[3], const int64_t (&strides)[3]);
// rows_aligned16 for q, k, v and, in the backward, dout, with the extents of a.shape.
bool operands_aligned16(const AnchorAttentionArgs& a, bool backward);

// The plan kernel's check of anchors and ctx_start against [0, S], in kAnchorStatusWords words the caller
// zero-fills: [0] entries of anchors outside, [1] ~(the first one's index b * N + n), [2], [3] the same for
// ctx_start (a tensor of shape [N] is checked once, as batch 0). describe_anchor_status returns "" when all are
// inside, else the message naming the first entry outside and the count; *_batched: the tensor is [batch, N].
constexpr int kAnchorStatusWords = 4;
std::string describe_anchor_status(const uint64_t (&status)[kAnchorStatusWords], const AnchorAttentionShape& s,
                                   bool anchors_batched, bool ctx_start_batched);

}  // namespace dflash::kernels::cuda
