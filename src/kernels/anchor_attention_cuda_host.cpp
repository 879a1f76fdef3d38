#include "anchor_attention_cuda_host.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

namespace dflash::kernels::cuda {

const char* tile_kernel_name(TileKernel k) {
  switch (k) {
    case TileKernel::Forward: return "forward";
    case TileKernel::Backward: return "backward";
    case TileKernel::DqRows: return "deterministic dQ";
  }
  return "?";
}

int64_t tile_dynamic_smem(const TileConfig& c) {
  const int64_t row = int64_t(c.head_dim + kPad) * 2;  // one padded 16-bit row of head_dim elements
  switch (c.kernel) {
    case TileKernel::Forward: return (kBM + 2 * c.stages * c.keys) * row;       // Q; K and V per stage
    case TileKernel::DqRows: return (2 * kBM + 2 * c.stages * c.keys) * row;    // Q, dO; K and V per stage
    case TileKernel::Backward:                                                  // K, V, Q, dO; P and dS
      return (2 * c.keys + 2 * kBM) * row + 2 * kBM * int64_t(c.keys + kPad) * 2;
  }
  return 0;
}

int64_t tile_static_smem_estimate(TileKernel k) {
  // nvcc rounds a kernel's static shared memory up to 16 bytes (ptxas -v: 1552 for the forward's 1544).
  auto rounded = [](size_t bytes) { return int64_t((bytes + 15) / 16 * 16); };
  switch (k) {
    case TileKernel::Forward: return rounded(sizeof(FwdRowsShared));
    case TileKernel::DqRows: return rounded(sizeof(DqRowsShared));
    case TileKernel::Backward: return rounded(sizeof(BwdRowsShared));
  }
  return 0;
}

const std::vector<TileConfig>& tile_configs() {
  // Bytes (dynamic + static) in the comments: 99 KB cards (sm_86, sm_89, sm_120) allow 101,376 per block,
  // sm_80 166,912, sm_90 and sm_100 232,448.
  using K = TileKernel;
  static const std::vector<TileConfig> t = {
      {K::Forward, 64, 64, 2},    //  47,632
      {K::Forward, 128, 64, 2},   //  88,592
      {K::Forward, 256, 32, 2},   // 102,928: 32 keys keep O and S in registers at D = 256
      {K::Forward, 256, 32, 1},   //  69,136: one stage (16 keys x 2 stages spilled registers on sm_8x)
      {K::Backward, 64, 128, 1},  //  91,648
      {K::Backward, 128, 128, 1}, // 140,800
      {K::Backward, 128, 64, 1},  //  89,600
      {K::Backward, 256, 64, 1},  // 155,136
      {K::Backward, 256, 16, 1},  //  92,160: half the warps score a 16-key tile
      {K::DqRows, 64, 64, 2},     //  57,360
      {K::DqRows, 128, 64, 2},    // 106,512
      {K::DqRows, 128, 32, 2},    //  71,696
      {K::DqRows, 256, 32, 2},    // 137,232
      {K::DqRows, 256, 16, 1},    //  86,544: two 16-key stages would need 103,440
  };
  return t;
}

const TileConfig* choose_tile_config(TileKernel k, int head_dim, int64_t limit, const StaticSmem& static_smem) {
  for (const TileConfig& c : tile_configs())
    if (c.kernel == k && c.head_dim == head_dim && tile_dynamic_smem(c) + static_smem(c) <= limit) return &c;
  return nullptr;
}

std::string no_tile_fits(TileKernel k, int head_dim, int64_t limit, const StaticSmem& static_smem,
                         const std::string& device) {
  const TileConfig* smallest = nullptr;
  int64_t need = 0;
  for (const TileConfig& c : tile_configs()) {
    if (c.kernel != k || c.head_dim != head_dim) continue;
    const int64_t bytes = tile_dynamic_smem(c) + static_smem(c);
    if (!smallest || bytes < need) {
      smallest = &c;
      need = bytes;
    }
  }
  std::string msg = std::string("no ") + tile_kernel_name(k) + " kernel configuration for head_dim " +
                    std::to_string(head_dim) + " fits the shared memory of " + device + ": it allows " +
                    std::to_string(limit) + " bytes per block";
  if (smallest)
    msg += ", the smallest configuration (" + std::to_string(smallest->keys) + " keys per tile) needs " +
           std::to_string(need) + " (dynamic " + std::to_string(tile_dynamic_smem(*smallest)) + " + static " +
           std::to_string(need - tile_dynamic_smem(*smallest)) + ")";
  return msg;
}

bool parse_smem_limit(const char* text, int64_t& bytes) {
  if (!text || !*text || std::strlen(text) > 12) return false;
  for (const char* c = text; *c; ++c)
    if (*c < '0' || *c > '9') return false;
  bytes = std::strtoll(text, nullptr, 10);
  return bytes > 0;
}

int64_t smem_limit_switch() {
  const char* text = std::getenv("DFLASH_CUDA_SMEM_LIMIT");
  if (!text) return 0;
  int64_t bytes = 0;
  if (!parse_smem_limit(text, bytes))
    throw std::invalid_argument(std::string("DFLASH_CUDA_SMEM_LIMIT must be a positive number of bytes (e.g. 101376), "
                                            "got '") + text + "'");
  return bytes;
}

const char* anchor_attention_cuda_unsupported(const AnchorAttentionShape& s) {
  if (s.dtype != ScalarType::BFloat16 && s.dtype != ScalarType::Float16) return "dtype must be bfloat16 or float16";
  if (s.head_dim != 64 && s.head_dim != 128 && s.head_dim != 256) return "head_dim must be 64, 128 or 256";
  if (s.kv_heads < 1 || s.q_heads % s.kv_heads != 0) return "q heads must be a multiple of kv heads";
  if (s.block_size < 1) return "block_size must be >= 1";
  if (s.context_len + s.num_blocks * s.block_size >= (int64_t(1) << 30) ||
      s.num_blocks * s.block_size * s.q_heads >= (int64_t(1) << 30))
    return "sequence too long for 32-bit token indices";
  if (s.batch > 65535 || s.kv_heads > 65535) return "batch and kv heads must be <= 65535";
  return nullptr;
}

BwdChunks plan_bwd_chunks(const AnchorAttentionShape& s, bool deterministic, int64_t bound_bytes) {
  BwdChunks c;
  if (s.batch <= 0 || s.kv_heads <= 0) return c;
  const int64_t rows_per_pair = (s.q_heads / s.kv_heads) * s.num_blocks * s.block_size;
  const int64_t floats_per_row = deterministic ? 1 : 1 + s.head_dim;
  const int64_t pair_bytes = std::max<int64_t>(1, 4 * rows_per_pair * floats_per_row);
  const int64_t batch_bytes = pair_bytes * s.kv_heads;
  if (batch_bytes <= bound_bytes) {  // whole batches, all heads (divisions: the products could overflow)
    c.batches = std::min(s.batch, bound_bytes / batch_bytes);
    c.kv_heads = s.kv_heads;
  } else {
    c.batches = 1;
    c.kv_heads = std::max<int64_t>(1, bound_bytes / pair_bytes);
  }
  c.count = ((s.batch + c.batches - 1) / c.batches) * ((s.kv_heads + c.kv_heads - 1) / c.kv_heads);
  c.delta_floats = c.batches * c.kv_heads * rows_per_pair;
  c.dq_acc_floats = deterministic ? 0 : c.delta_floats * s.head_dim;
  return c;
}

bool rows_aligned16(const void* data, const int64_t (&sizes)[3], const int64_t (&strides)[3]) {
  if (reinterpret_cast<uintptr_t>(data) % 16 != 0) return false;
  for (int d = 0; d < 3; ++d)
    if (sizes[d] > 1 && strides[d] % 8 != 0) return false;
  return true;
}

bool operands_aligned16(const AnchorAttentionArgs& a, bool backward) {
  const auto& s = a.shape;
  const int64_t q_sizes[3] = {s.batch, s.num_blocks * s.block_size, s.q_heads};
  const int64_t k_sizes[3] = {s.batch, s.context_len + s.num_blocks * s.block_size, s.kv_heads};
  auto ok = [](const Strided& x, const int64_t (&sizes)[3]) {
    const int64_t strides[3] = {x.sb, x.st, x.sh};
    return rows_aligned16(x.data, sizes, strides);
  };
  return ok(a.q, q_sizes) && ok(a.k, k_sizes) && ok(a.v, k_sizes) && (!backward || ok(a.dout, q_sizes));
}

std::string describe_anchor_status(const uint64_t (&status)[kAnchorStatusWords], const AnchorAttentionShape& s,
                                   bool anchors_batched, bool ctx_start_batched) {
  std::string msg;
  auto one = [&](const char* name, uint64_t count, uint64_t first_inverted, bool batched) {
    if (count == 0) return;
    const uint64_t first = ~first_inverted, n = s.num_blocks > 0 ? uint64_t(s.num_blocks) : 1;
    const std::string where = batched ? std::to_string(first / n) + ", " + std::to_string(first % n)
                                      : std::to_string(first % n);
    if (!msg.empty()) msg += "; ";
    msg += std::string(name) + "[" + where + "]";
    if (count > 1) msg += " and " + std::to_string(count - 1) + (count == 2 ? " more entry" : " more entries");
    msg += count > 1 ? " lie" : " lies";
    msg += " outside [0, S] with context length S = " + std::to_string(s.context_len);
  };
  one("anchors", status[0], status[1], anchors_batched);
  one("ctx_start", status[2], status[3], ctx_start_batched);
  return msg;
}

}  // namespace dflash::kernels::cuda
