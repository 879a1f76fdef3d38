// dflash doctor, section 5 (--config FILE): a training run's own shapes and memory plan, checked on the devices it
// names before it starts (doctor.h). The drafter config is resolved as `dflash train` resolves it, from config
// files only; the self-check specs and the planner's settings are the trainer's own (run_attention_specs,
// run_plan_settings).
#include <utility>

#include "compute_settings.h"
#include "doctor.h"
#include "drafter_family_setting.h"
#include "memory_fit.h"
#include "memory_planner.h"
#include "run_settings.h"
#include "step_runner.h"
#include "target_setup.h"
#include "train_config.h"

namespace dflash::doctor {

using namespace dflash::train;  // doctor asks the trainer's own functions what a run would do
namespace {

std::string join(const std::vector<int64_t>& v) {
  std::string s;
  for (const int64_t x : v) (s += s.empty() ? "" : ",") += std::to_string(x);
  return s;
}

// The plan of one worker on `device` times the workers the run puts there, against the device's free memory.
CheckRow memory_row(const TrainConfig& cfg, const drafter::DrafterConfig& d, at::ScalarType compute,
                    at::Device device, int64_t workers) {
  return run_check("config_memory", device.str(), "memory plan", [&](CheckRow& row) {
    const plan::MemoryPlan plan =
        plan::plan_memory(run_plan_settings(cfg, d, compute, device.is_cuda() ? plan::PlanDevice::Cuda : plan::PlanDevice::Cpu));
    const plan::DeviceFit fit = plan::device_fit(plan, device, workers);  // the comparison train refuses by
    row.status = fit.fits ? CheckStatus::Pass : CheckStatus::Fail;
    row.detail = fit.text +
                 (fit.fits ? "" : "; `dflash plan --budget` finds settings that fit (activation_checkpoint, loss_chunk_rows)");
    row.data = {{"peak_bytes", plan.peak_bytes}, {"peak_phase", plan.peak_phase}, {"workers", workers},
                {"need_bytes", fit.need_bytes},  {"free_bytes", fit.available_bytes}};
  });
}

}  // namespace

void check_run_config(const std::string& path, const RowSink& sink, nlohmann::json& summary) {
  TrainConfig cfg;
  drafter::DrafterConfig d;
  at::ScalarType compute = at::kBFloat16;
  std::vector<std::pair<at::Device, int64_t>> devices;  // each drafter device once, with its worker count
  const CheckRow read = run_check("config", "", path, [&](CheckRow& row) {
    apply_config_file(cfg, path);
    // data and out are not read here: a config may leave them to flags
    if (cfg.data.empty()) cfg.data = "-";
    if (cfg.out.empty()) cfg.out = "-";
    // train's own reading: the same configs pass, the same errors; the devices parsed once, there
    const RunDevices node = validate_run_settings(cfg, "doctor --config");
    compute = ops::scalar_type(cfg.dtype);
    devices = drafter_device_workers(node.drafter);
    d = resolve_drafter_config_from_files(cfg, node);
    std::vector<int64_t> windows;
    for (int64_t i = 0; i < d.num_hidden_layers; ++i) windows.push_back(d.window_for_layer(i));
    row.detail = "drafter " + std::to_string(d.num_hidden_layers) + " layers, hidden " + std::to_string(d.hidden_size) +
                 ", heads " + std::to_string(d.num_attention_heads) + "/" + std::to_string(d.num_key_value_heads) +
                 ", head_dim " + std::to_string(d.head_dim) + ", block " + std::to_string(d.block_size) + ", windows [" +
                 join(windows) + "]; " + util::dtype_name(cfg.dtype) + ", max_len " + std::to_string(cfg.max_len) + ", batch " +
                 std::to_string(cfg.batch_size) + (cfg.pack ? ", packed" : "") + "; drafter devices " +
                 cfg.drafter_devices.text;
    summary = {{"path", path},
               {"dtype", util::dtype_name(cfg.dtype)},
               {"max_len", cfg.max_len},
               {"batch_size", cfg.batch_size},
               {"num_anchors", cfg.num_anchors},
               {"pack", cfg.pack},
               {"attention_backend", ops::attention_backend_name(cfg.attention_backend)},
               {"drafter_devices", cfg.drafter_devices.text},
               {"drafter",
                {{"num_hidden_layers", d.num_hidden_layers},
                 {"hidden_size", d.hidden_size},
                 {"num_attention_heads", d.num_attention_heads},
                 {"num_key_value_heads", d.num_key_value_heads},
                 {"head_dim", d.head_dim},
                 {"block_size", d.block_size},
                 {"windows", windows}}}};
    row.data = summary;
  });
  sink(read);
  if (read.status != CheckStatus::Pass) return;

  for (const auto& [device, workers] : devices) {
    const CheckRow present = run_check("config_attention", device.str(), "device", [&](CheckRow& row) {
      ops::check_device_available(device, device.str(), "train config: 'drafter_devices'");
      row.detail = std::to_string(workers) + (workers == 1 ? " drafter worker" : " drafter workers");
    });
    if (present.status != CheckStatus::Pass) {
      sink(present);
      continue;
    }
    for (const auto& spec : run_attention_specs(cfg, d, compute, device)) {
      CheckRow row = attention_row("config_attention", spec);
      const bool reference_failed = row.data.is_object() && row.data.contains("reference_exception") &&
                                    row.data["reference_exception"].is_string() &&
                                    !row.data["reference_exception"].get<std::string>().empty();
      if (row.status == CheckStatus::Fail && reference_failed)  // no fallback: the reference is what failed
        row.detail += "; the reference attention failed too: dflash train would stop before its first step on " +
                      device.str() + " (whatever its attention_backend)";
      else if (row.status == CheckStatus::Fail)  // what `dflash train` would make of it
        row.detail += cfg.attention_backend == ops::AttentionBackend::Fused
                          ? "; dflash train (attention_backend fused) would refuse to start"
                          : "; dflash train (attention_backend " + std::string(ops::attention_backend_name(cfg.attention_backend)) +
                                ") would run the reference attention on " + device.str();
      sink(row);
    }
    sink(memory_row(cfg, d, compute, device, workers));
  }
  if (cfg.budget.set())
    sink(run_check("config_memory", "", "budget " + cfg.budget.text, [&](CheckRow& row) {
      check_budget(cfg, d, compute);
      row.detail = "the planned peak per worker fits the config's budget";
    }));
}

}  // namespace dflash::doctor
