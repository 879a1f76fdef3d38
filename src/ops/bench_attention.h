// `dflash bench attention` as a function (the command parses its flags into BenchAttentionOptions and calls
// run_bench_attention): the fused op against our reference attention (LibTorch ops only, the fallback of
// attention_backend auto) and the ways the DFlash mask is run without either (dense mask, the seed's per-block
// SDPA, compiled flex_attention through the Python driver), on the same inputs in one run: forward and
// forward+backward time, peak extra memory, error vs an fp64 result, and the reference's memory ratios.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <c10/core/Device.h>
#include <nlohmann/json.hpp>

namespace dflash::ops {

struct BenchAttentionOptions {
  // Shapes by name (--help lists them: quick, seed-scaled and its series, seed, seed-27b, ...).
  std::vector<std::string> configs = {"quick", "seed-scaled", "series-S1024", "series-S4096", "series-N128",
                                      "series-N512"};
  std::vector<std::string> impls = {"fused", "reference", "dense", "per_block_sdpa", "flex"};
  at::Device device = at::kCPU;
  int64_t reps = 3;              // timed repetitions after one warm-up that also measures memory
  int64_t chunk_blocks = 32;     // blocks per chunk of the per-block SDPA baseline
  double mem_limit_bytes = 0;    // skip a baseline predicted above this; 0: 60% of the available memory
  bool cpu_efficiency = false;   // also time the fused forward and torch.mm on one thread by CPU time
};

// Prints each shape's table as it goes; returns {"gemm_gflops", "device", "threads", "cpu_isa", "configs": [rows],
// "reference_memory": [...]}. Uses the calling thread's intra-op thread count.
nlohmann::json run_bench_attention(const BenchAttentionOptions& o);

}  // namespace dflash::ops
