// dflash doctor, sections 1 and 2: what this build runs with and each device (doctor.h).
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <thread>

#include <ATen/Parallel.h>
#include <torch/headeronly/version.h>

#include "compute_settings.h"
#include "cpu_isa.h"
#include "cuda_build_info.h"
#include "cuda_device_report.h"
#include "distributed.h"
#include "doctor.h"
#include "byte_size.h"
#include "memory_probe.h"
#include "selfcheck_tolerance.h"
#include "source_version.h"

namespace dflash::doctor {

using namespace dflash::train;  // doctor asks the trainer's own functions what a run would do
namespace {

// The head dims whose tile configurations the CUDA device rows list (those the kernels are compiled for).
const std::vector<int> kHeadDims = {64, 128, 256};

std::string cpu_model_name() {
  std::ifstream f("/proc/cpuinfo");
  for (std::string line; std::getline(f, line);)
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(" \t", colon + 1));
    }
  return "unknown CPU";
}

nlohmann::json tile_json(const ops::CudaTileChoice& t) {
  nlohmann::json j = {{"kernel", t.kernel}, {"head_dim", t.head_dim}};
  if (!t.error.empty()) {
    j["error"] = t.error;
  } else {
    j["keys"] = t.keys;
    j["stages"] = t.stages;
    j["smem_bytes"] = t.smem_bytes;
  }
  return j;
}

CheckRow describe_cpu(nlohmann::json& j) {
  return run_check("device", "cpu", "cpu", [&](CheckRow& row) {
    const int64_t total = util::total_memory_bytes(), available = util::available_memory_bytes();
    j = {{"device", "cpu"},
         {"name", cpu_model_name()},
         {"cores", std::thread::hardware_concurrency()},
         {"memory_total_bytes", total},
         {"memory_available_bytes", available},
         {"cpu_isa", kernels::isa_name(kernels::cpu_isa())}};
    row.name = j["name"];
    row.detail = std::to_string(std::thread::hardware_concurrency()) + " cores, memory " +
                 util::human_bytes(double(total)) + " (" + util::human_bytes(double(available)) +
                 " available), kernels " + kernels::isa_name(kernels::cpu_isa());
    row.data = j;
  });
}

CheckRow describe_cuda(at::Device d, nlohmann::json& j) {
  return run_check("device", d.str(), d.str(), [&](CheckRow& row) {
    ops::check_device_available(d, d.str(), "doctor: --devices");
    j = {{"device", d.str()}};
    const ops::CudaDeviceReport r = ops::cuda_device_report(d.index(), kHeadDims);
    const std::string sm = "sm_" + std::to_string(r.major * 10 + r.minor);
    nlohmann::json tiles = nlohmann::json::array();
    std::string tile_error;
    for (const auto& t : r.tiles) {
      tiles.push_back(tile_json(t));
      if (!t.error.empty() && tile_error.empty()) tile_error = t.error;
    }
    j.update({{"name", r.name},
              {"capability", std::to_string(r.major) + "." + std::to_string(r.minor)},
              {"multiprocessors", r.multiprocessors},
              {"memory_total_bytes", r.memory_total},
              {"memory_free_bytes", r.memory_free},
              {"smem_per_block_optin", r.smem_optin},
              {"smem_limit", r.smem_limit},
              {"kernel_image", r.kernel_image},
              {"tiles", tiles}});
    if (!r.kernel_image) j["kernel_image_error"] = r.kernel_image_error;
    row.name = r.name + ", " + sm;
    row.data = j;
    if (!r.kernel_image) {
      row.status = CheckStatus::Fail;
      row.detail = "no kernel image for " + sm + " in this build (" + kernels::cuda_compiled_archs() + "): " +
                   r.kernel_image_error + "; rebuild with DFLASH_CUDA_ARCHS=" + std::to_string(r.major * 10 + r.minor);
      return;
    }
    if (!tile_error.empty()) {
      row.status = CheckStatus::Fail;
      row.detail = tile_error;
      return;
    }
    row.detail = std::to_string(r.multiprocessors) + " SMs, memory " + util::human_bytes(double(r.memory_total)) +
                 " (" + util::human_bytes(double(r.memory_free)) + " free), shared memory " +
                 std::to_string(r.smem_optin) + " B per block" +
                 (r.smem_limit < r.smem_optin ? " (tiles chosen for " + std::to_string(r.smem_limit) + ")" : "") +
                 ", kernel image found";
  });
}

}  // namespace

const char* check_status_name(CheckStatus s) {
  switch (s) {
    case CheckStatus::Pass: return "pass";
    case CheckStatus::Fail: return "fail";
    case CheckStatus::Skip: return "skip";
  }
  return "?";
}

CheckRow run_check(const std::string& section, const std::string& device, const std::string& name,
                   const std::function<void(CheckRow&)>& body) {
  CheckRow row;
  row.section = section, row.device = device, row.name = name;
  try {
    body(row);
  } catch (const std::exception& e) {
    row.status = CheckStatus::Fail;
    row.detail = ops::exception_first_line(e);
  }
  return row;
}

nlohmann::json doctor_versions() {
  const ops::CudaVersions cuda = ops::cuda_versions();
  nlohmann::json runnable = nlohmann::json::array();
  for (const auto isa : kernels::runnable_isas()) runnable.push_back(kernels::isa_name(isa));
  return {{"dflash", source_version()},
          {"torch", TORCH_VERSION},
          {"cuda_runtime", cuda.runtime},
          {"cuda_driver", cuda.driver},
          {"cudnn", cuda.cudnn},
          {"nccl", nccl_version()},
          {"cuda_kernels", ops::cuda_kernels_built()},
          {"cuda_archs", kernels::cuda_compiled_archs()},
          {"gloo", have_gloo()},
          {"cpu_isa", kernels::isa_name(kernels::cpu_isa())},
          {"cpu_isas", runnable},
          {"cpu_isa_forced", kernels::cpu_isa_forced()},
          {"threads", at::get_num_threads()}};
}

std::vector<at::Device> default_doctor_devices() {
  std::vector<at::Device> out = {at::kCPU};
  for (int i = 0; i < ops::cuda_device_count(); ++i) out.emplace_back(at::kCUDA, static_cast<c10::DeviceIndex>(i));
  return out;
}

CheckRow describe_device(at::Device d, nlohmann::json& description) {
  description = {{"device", d.str()}};
  CheckRow row = d.is_cpu() ? describe_cpu(description) : describe_cuda(d, description);
  if (row.status == CheckStatus::Fail && !description.contains("name")) description["error"] = row.detail;
  return row;
}

}  // namespace dflash::doctor
