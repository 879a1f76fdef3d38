// dflash doctor, section 3: the kernels on one device against their references, timed, and the GEMM rate
// (doctor.h).
#include <cstdio>

#include "doctor.h"
#include "gemm_rate.h"
#include "loss_selfcheck.h"
#include "selfcheck_json.h"

namespace dflash::doctor {

using namespace dflash::train;  // doctor asks the trainer's own functions what a run would do
namespace {

std::string ms_text(double ms) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f ms", ms);
  return buf;
}

}  // namespace

std::vector<ops::AttentionCheckSpec> standard_attention_specs(at::Device d, bool quick) {
  // The CPU's shapes stay small (the whole report in seconds on 2 cores); a GPU's are a training run's.
  const bool cuda = d.is_cuda();
  const int64_t S = cuda ? (quick ? 2048 : 4096) : 128;
  struct Variant {
    int64_t q_heads, kv_heads, window;
    bool packed;
  };
  const Variant variants[] = {
      {cuda ? 32 : 4, cuda ? 8 : 1, 0, true},      // grouped KV heads (a group of 4), packed rows
      {cuda ? 8 : 2, cuda ? 8 : 2, S / 4, false},  // a group of one, a sliding window
  };
  const std::vector<int64_t> head_dims = quick ? std::vector<int64_t>{128} : std::vector<int64_t>{64, 128, 256};
  const at::ScalarType dtypes[] = {cuda ? at::kBFloat16 : at::kFloat, cuda ? at::kHalf : at::kBFloat16};
  std::vector<ops::AttentionCheckSpec> out;
  for (const int64_t D : head_dims)
    for (const at::ScalarType dtype : dtypes)
      for (const Variant& v : variants) {
        ops::AttentionCheckSpec s;
        s.device = d;
        s.dtype = dtype;
        s.context_len = S;
        s.q_heads = v.q_heads, s.kv_heads = v.kv_heads, s.head_dim = D, s.block_size = 16;
        s.window = v.window;
        s.packed = v.packed;
        out.push_back(s);
      }
  return out;
}

ops::AttentionCheckSpec timing_attention_spec(at::Device d, bool quick) {
  ops::AttentionCheckSpec s;
  s.device = d;
  s.block_size = 16;
  s.head_dim = 128;
  if (d.is_cuda()) {  // the seed's heads at half its context: 512 blocks of 16 per row
    s.dtype = at::kBFloat16;
    s.context_len = 4096, s.num_blocks = 512, s.q_heads = 32, s.kv_heads = 8, s.timing_reps = 5;
  } else {  // a quarter of bench attention's seed-scaled CPU shape
    s.dtype = at::kFloat;
    s.context_len = 1024, s.num_blocks = 64, s.q_heads = 8, s.kv_heads = 2, s.timing_reps = 2;
  }
  if (quick) s.context_len /= 2, s.num_blocks /= 2;
  return s;
}

CheckRow attention_row(const std::string& section, const ops::AttentionCheckSpec& spec) {
  const std::string device = spec.device.str();
  const std::string name = spec.describe().substr(device.size() + 1);  // the device has a column of its own
  return run_check(section, device, name, [&](CheckRow& row) {
    const ops::AttentionCheckResult r = ops::check_fused_attention(spec);
    row.status = r.passed ? CheckStatus::Pass : CheckStatus::Fail;
    row.detail = r.summary();
    if (spec.timing_reps > 0 && r.fused_ms >= 0 && r.reference_ms >= 0) {  // a single untimed call says little
      row.detail += "; fused " + ms_text(r.fused_ms) + ", reference " + ms_text(r.reference_ms);
      if (r.fused_ms > 0) {
        char ratio[48];
        std::snprintf(ratio, sizeof ratio, " (%.1fx the fused op's time)", r.reference_ms / r.fused_ms);
        row.detail += ratio;
      }
    }
    row.data = attention_check_json(r);
  });
}

void check_kernels(at::Device d, bool quick, const RowSink& sink) {
  const std::string device = d.str();
  for (const auto& spec : standard_attention_specs(d, quick)) sink(attention_row("attention", spec));
  sink(attention_row("timing", timing_attention_spec(d, quick)));
  sink(run_check("gemm", device, "torch.mm", [&](CheckRow& row) {
    const ops::GemmRate g = ops::measure_gemm_rate(d);
    char buf[96];
    if (g.gflops >= 1000)
      std::snprintf(buf, sizeof buf, "%s: %.1f TFLOP/s", g.shape.c_str(), g.gflops / 1000);
    else
      std::snprintf(buf, sizeof buf, "%s: %.1f GFLOP/s", g.shape.c_str(), g.gflops);
    row.name = "torch.mm " + g.shape;
    row.detail = buf;
    row.data = {{"shape", g.shape}, {"gflops", g.gflops}};
  }));
  if (!d.is_cpu()) return;  // the cross-entropy kernel is the CPU's (CUDA runs the generic loss)
  for (const at::ScalarType dtype : quick ? std::vector<at::ScalarType>{at::kFloat}
                                          : std::vector<at::ScalarType>{at::kFloat, at::kBFloat16}) {
    ops::LossCheckSpec spec;
    spec.dtype = dtype;
    sink(run_check("loss", device, spec.describe().substr(device.size() + 1), [&](CheckRow& row) {
      const ops::LossCheckResult r = ops::check_fused_cross_entropy(spec);
      row.status = r.passed ? CheckStatus::Pass : CheckStatus::Fail;
      row.detail = r.summary();
      row.data = loss_check_json(r);
    }));
  }
}

}  // namespace dflash::doctor
