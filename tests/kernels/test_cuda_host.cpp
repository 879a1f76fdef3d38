// The host-side decisions of the CUDA attention that need no GPU (anchor_attention_cuda_host.h): which tile
// configuration each shared-memory size gets, the error when none fits, the backward's workspace chunks, the
// alignment rule and the range check's message. The configurations themselves run in the CPU emulation
// (tests/python/test_attention_cuda_emulated.py).
#include <gtest/gtest.h>

#include <set>
#include <tuple>

#include "anchor_attention_cuda_host.h"

namespace kc = dflash::kernels::cuda;
using kc::TileKernel;

namespace {

constexpr int64_t kSmall = 101376;  // sm_86, sm_89, sm_120 (99 KB opt-in per block)
constexpr int64_t kSm80 = 166912;   // sm_80 (163 KB)
constexpr int64_t kLarge = 232448;  // sm_90, sm_100 (227 KB)

int64_t estimate(const kc::TileConfig& c) { return kc::tile_static_smem_estimate(c.kernel); }

std::tuple<int, int> choice(TileKernel k, int d, int64_t limit) {
  const kc::TileConfig* c = kc::choose_tile_config(k, d, limit, estimate);
  return c ? std::make_tuple(c->keys, c->stages) : std::make_tuple(0, 0);
}

}  // namespace

TEST(CudaTiles, SharedMemoryOfTheConfigurations) {
  // The figures of the issue: the forward at D = 256 with 32-key tiles and the D = 128 / 256 backwards need
  // more than 99 KB cards allow.
  const auto bytes = [](TileKernel k, int d, int keys, int stages) {
    const kc::TileConfig c{k, d, keys, stages};
    return kc::tile_dynamic_smem(c) + estimate(c);
  };
  EXPECT_EQ(bytes(TileKernel::Forward, 256, 32, 2), 102928);
  EXPECT_EQ(bytes(TileKernel::Backward, 128, 128, 1), 140800);
  EXPECT_EQ(bytes(TileKernel::Backward, 256, 64, 1), 155136);
  EXPECT_EQ(kc::tile_static_smem_estimate(TileKernel::Forward), 1552);  // what ptxas -v reports
  EXPECT_EQ(kc::tile_static_smem_estimate(TileKernel::DqRows), 2064);
  EXPECT_EQ(kc::tile_static_smem_estimate(TileKernel::Backward), 1536);
}

TEST(CudaTiles, ChoiceBySharedMemory) {
  for (int64_t limit : {kSmall, kSm80, kLarge}) {
    EXPECT_EQ(choice(TileKernel::Forward, 64, limit), std::make_tuple(64, 2));
    EXPECT_EQ(choice(TileKernel::Forward, 128, limit), std::make_tuple(64, 2));
    EXPECT_EQ(choice(TileKernel::Backward, 64, limit), std::make_tuple(128, 1));
    EXPECT_EQ(choice(TileKernel::DqRows, 64, limit), std::make_tuple(64, 2));
  }
  EXPECT_EQ(choice(TileKernel::Forward, 256, kSmall), std::make_tuple(32, 1));
  EXPECT_EQ(choice(TileKernel::Backward, 128, kSmall), std::make_tuple(64, 1));
  EXPECT_EQ(choice(TileKernel::Backward, 256, kSmall), std::make_tuple(16, 1));
  EXPECT_EQ(choice(TileKernel::DqRows, 128, kSmall), std::make_tuple(32, 2));
  EXPECT_EQ(choice(TileKernel::DqRows, 256, kSmall), std::make_tuple(16, 1));
  for (int64_t limit : {kSm80, kLarge}) {
    EXPECT_EQ(choice(TileKernel::Forward, 256, limit), std::make_tuple(32, 2));
    EXPECT_EQ(choice(TileKernel::Backward, 128, limit), std::make_tuple(128, 1));
    EXPECT_EQ(choice(TileKernel::Backward, 256, limit), std::make_tuple(64, 1));
    EXPECT_EQ(choice(TileKernel::DqRows, 128, limit), std::make_tuple(64, 2));
    EXPECT_EQ(choice(TileKernel::DqRows, 256, limit), std::make_tuple(32, 2));
  }
  EXPECT_EQ(choice(TileKernel::Forward, 96, kLarge), std::make_tuple(0, 0));  // no such head dim
}

TEST(CudaTiles, ChoiceCountsTheStaticSharedMemory) {
  // 88,592 bytes in all for the D = 128 forward: a limit between its dynamic part and the total refuses it.
  const kc::TileConfig fwd{TileKernel::Forward, 128, 64, 2};
  const int64_t dynamic = kc::tile_dynamic_smem(fwd);
  EXPECT_EQ(choice(TileKernel::Forward, 128, dynamic + 1551), std::make_tuple(0, 0));
  EXPECT_EQ(choice(TileKernel::Forward, 128, dynamic + 1552), std::make_tuple(64, 2));
  // The CUDA op passes the compiler's figure: a larger static part moves the choice.
  const kc::StaticSmem big = [](const kc::TileConfig&) { return int64_t(20000); };
  const kc::TileConfig* c = kc::choose_tile_config(TileKernel::Backward, 128, kSmall, big);
  ASSERT_EQ(c, nullptr);
}

TEST(CudaTiles, EveryConfigurationIsChosenAtOneOfTheTestedLimits) {
  // The emulation tests run 99 KB and 227 KB; a configuration chosen at neither would never run there.
  std::set<const kc::TileConfig*> chosen;
  for (TileKernel k : {TileKernel::Forward, TileKernel::Backward, TileKernel::DqRows})
    for (int d : {64, 128, 256})
      for (int64_t limit : {kSmall, kLarge}) chosen.insert(kc::choose_tile_config(k, d, limit, estimate));
  for (const kc::TileConfig& c : kc::tile_configs())
    EXPECT_TRUE(chosen.count(&c)) << kc::tile_kernel_name(c.kernel) << " D=" << c.head_dim << " keys=" << c.keys
                                  << " stages=" << c.stages;
}

TEST(CudaTiles, NothingFitsNamesTheDeviceAndTheBytes) {
  EXPECT_EQ(kc::no_tile_fits(TileKernel::Backward, 256, 49152, estimate, "cuda:1 (NVIDIA RTX A4000, sm_86)"),
            "no backward kernel configuration for head_dim 256 fits the shared memory of cuda:1 (NVIDIA RTX A4000, "
            "sm_86): it allows 49152 bytes per block, the smallest configuration (16 keys per tile) needs 92160 "
            "(dynamic 90624 + static 1536)");
}

TEST(CudaTiles, SharedMemoryLimitOverride) {
  int64_t bytes = 0;
  EXPECT_TRUE(kc::parse_smem_limit("101376", bytes));
  EXPECT_EQ(bytes, 101376);
  for (const char* bad : {"", "0", "-5", "99KB", "1e5", " 100", "1234567890123"})
    EXPECT_FALSE(kc::parse_smem_limit(bad, bytes)) << bad;
}

TEST(CudaBackwardChunks, WorkspaceUnderTheBound) {
  dflash::kernels::AnchorAttentionShape s;
  s.batch = 8;
  s.q_heads = 64;
  s.kv_heads = 8;
  s.num_blocks = 4096;
  s.block_size = 16;  // N*B = 65536
  s.head_dim = 256;
  // The example: 34 GB of fp32 dQ accumulator in one piece; one (batch, KV head) pair is 4.3 GB.
  const int64_t pair_rows = 8 * 65536;
  const kc::BwdChunks all = kc::plan_bwd_chunks(s, false, int64_t(1) << 62);
  EXPECT_EQ(all.count, 1);
  EXPECT_EQ(all.dq_acc_floats, 8 * 64 * 65536 * int64_t(256));
  const kc::BwdChunks c = kc::plan_bwd_chunks(s, false);
  EXPECT_EQ(c.batches, 1);
  EXPECT_EQ(c.kv_heads, 1);  // the least the chunking can do
  EXPECT_EQ(c.count, 64);
  EXPECT_EQ(c.bytes(), 4 * pair_rows * 257);
  // Deterministic: no accumulator, delta alone (2 MB a pair) -> 512 pairs = 64 batches' worth fit in 1 GiB.
  const kc::BwdChunks d = kc::plan_bwd_chunks(s, true);
  EXPECT_EQ(d.dq_acc_floats, 0);
  EXPECT_EQ(d.batches, 8);
  EXPECT_EQ(d.count, 1);
  EXPECT_EQ(d.bytes(), 4 * 8 * 8 * pair_rows);
  // Between: three pairs' worth runs 3 heads of a batch per chunk (the last chunk of a batch has 2).
  const kc::BwdChunks h = kc::plan_bwd_chunks(s, false, 3 * 4 * pair_rows * 257);
  EXPECT_EQ(std::make_tuple(h.batches, h.kv_heads, h.count), std::make_tuple(int64_t(1), int64_t(3), int64_t(8 * 3)));
  // Two batches' worth: 2 batches of all heads per chunk.
  const kc::BwdChunks b = kc::plan_bwd_chunks(s, false, 2 * 8 * 4 * pair_rows * 257);
  EXPECT_EQ(std::make_tuple(b.batches, b.kv_heads, b.count), std::make_tuple(int64_t(2), int64_t(8), int64_t(4)));
}

TEST(CudaAlignment, SizeOneDimensionsIgnoreTheirStride) {
  alignas(16) static uint16_t buf[64];
  const int64_t sizes[3] = {1, 4, 1}, odd[3] = {12345, 8, 7}, bad_token[3] = {16, 12, 8};
  EXPECT_TRUE(kc::rows_aligned16(buf, sizes, odd));
  EXPECT_FALSE(kc::rows_aligned16(buf, sizes, bad_token));
  EXPECT_FALSE(kc::rows_aligned16(buf + 1, sizes, odd));  // 2 bytes off
  const int64_t two_heads[3] = {1, 4, 2};
  EXPECT_FALSE(kc::rows_aligned16(buf, two_heads, odd));
}

TEST(CudaAnchorCheck, MessageNamesTheFirstEntryAndTheCount) {
  dflash::kernels::AnchorAttentionShape s;
  s.num_blocks = 5;
  s.context_len = 40;
  const uint64_t none[4] = {0, 0, 0, 0};
  EXPECT_EQ(kc::describe_anchor_status(none, s, true, true), "");
  const uint64_t three[4] = {3, ~uint64_t(7), 0, 0};  // first at flat index 7 = [1, 2]
  EXPECT_EQ(kc::describe_anchor_status(three, s, true, false),
            "anchors[1, 2] and 2 more entries lie outside [0, S] with context length S = 40");
  const uint64_t ctx[4] = {0, 0, 1, ~uint64_t(4)};
  EXPECT_EQ(kc::describe_anchor_status(ctx, s, true, false),
            "ctx_start[4] lies outside [0, S] with context length S = 40");
}
