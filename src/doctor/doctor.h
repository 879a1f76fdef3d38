// `dflash doctor`: the first command on a new machine. It reports what this build runs with (versions) and each
// device, then checks what training relies on, one row per check that passes, fails or is skipped:
//   device            the device answers; on CUDA this build holds a kernel image for it and the attention has a
//                     tile configuration for every head dim in its shared memory
//   attention         the fused attention against the reference at standard shapes (ops/attention_selfcheck.h)
//   timing            the same check at one realistic shape, timed: fused vs reference
//   gemm              torch.mm's rate (ops/gemm_rate.h)
//   loss              the CPU loss kernels' self-check: CE rows and DSpark's objective rows (ops/loss_selfcheck.h)
//   collective        an all-reduce through c10d Gloo and NCCL, ranks as threads of this process
//   config, config_attention, config_memory
//                     with --config: the run's drafter config as `dflash train` resolves it, the self-check at its
//                     shapes on each drafter device, its memory plan against each device's free memory (and its
//                     `budget`)
// An exception inside a check fails its row with the exception's first line; nothing stops the report.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include <c10/core/Device.h>
#include <nlohmann/json.hpp>

#include "attention_selfcheck.h"

namespace dflash::doctor {

enum class CheckStatus { Pass, Fail, Skip };
const char* check_status_name(CheckStatus s);  // "pass", "fail", "skip"

struct CheckRow {
  std::string section, device, name;  // device "" when the check is not about one device
  CheckStatus status = CheckStatus::Pass;
  std::string detail;                  // one line: the figures, or why it failed or was skipped
  nlohmann::json data = nlohmann::json::object();  // the figures for --json (per section: docs/DOCTOR.md)
};

// Receives each row as soon as its check has run (the command prints it at once).
using RowSink = std::function<void(const CheckRow&)>;

// A row for (section, device, name) that passes unless `body` says otherwise; an exception fails it with the
// exception's first line.
CheckRow run_check(const std::string& section, const std::string& device, const std::string& name,
                   const std::function<void(CheckRow&)>& body);

// What this build runs with: {"dflash", "torch", "cuda_runtime", "cuda_driver", "cudnn", "nccl", "cuda_archs",
// "cuda_kernels", "gloo", "cpu_isa", "cpu_isas", "cpu_isa_forced", "threads"} ("" where there is none).
nlohmann::json doctor_versions();

// The cpu and every CUDA device LibTorch sees.
std::vector<at::Device> default_doctor_devices();

// One device as the report shows it (the "devices" entries of the JSON), and its "device" row. A device that
// cannot be described gets {"device", "error"} and a failed row.
CheckRow describe_device(at::Device d, nlohmann::json& description);

// The standard shapes of the attention check on `d`: head dims 64, 128 and 256, two dtypes (fp32 and bf16 on the
// CPU, bf16 and fp16 on CUDA), each once with grouped KV heads, no window and packed rows and once with a group of
// one and a window. The CPU's shapes are small (S 128); CUDA's realistic (S 4096). `quick`: head dim 128 only.
std::vector<ops::AttentionCheckSpec> standard_attention_specs(at::Device d, bool quick);
// The realistic shape that is timed (also checked): many blocks at the CPU's or a GPU's scale.
ops::AttentionCheckSpec timing_attention_spec(at::Device d, bool quick);

// A row of the attention self-check at `spec` (section "attention", "timing" or "config_attention").
CheckRow attention_row(const std::string& section, const ops::AttentionCheckSpec& spec);

// Section 3 on one device: the attention at the standard shapes, the timing, the GEMM rate and, on the CPU, the
// loss kernels (cross-entropy rows, DSpark's objective rows).
void check_kernels(at::Device d, bool quick, const RowSink& sink);

// Section 4: Gloo (2 ranks on the CPU) always; NCCL over the CUDA devices among `devices` (one rank per GPU, a
// group of one with one GPU), skipped without a GPU or without NCCL in this build.
void check_collectives(const std::vector<at::Device>& devices, const RowSink& sink);

// Section 5 (--config): the rows of "config", "config_attention" and "config_memory"; `summary` gets the resolved
// run ({"path", "drafter", "dtype", "max_len", ...}) when the config could be read.
void check_run_config(const std::string& path, const RowSink& sink, nlohmann::json& summary);

}  // namespace dflash::doctor
