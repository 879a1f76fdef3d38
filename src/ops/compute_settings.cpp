#include "compute_settings.h"

#include <ATen/Context.h>
#include <ATen/DeviceAccelerator.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <limits>
#include <stdexcept>
#include <thread>

#include "device_list.h"
#include "memory_probe.h"
#include "parallel_threads.h"

namespace dflash::ops {

at::ScalarType scalar_type(util::Dtype d) {
  switch (d) {
    case util::Dtype::BF16: return at::kBFloat16;
    case util::Dtype::F16: return at::kHalf;
    case util::Dtype::F64: return at::kDouble;
    case util::Dtype::F32: break;
  }
  return at::kFloat;
}

util::Dtype dtype_of(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return util::Dtype::F32;
    case at::kBFloat16: return util::Dtype::BF16;
    case at::kHalf: return util::Dtype::F16;
    case at::kDouble: return util::Dtype::F64;
    default: throw std::invalid_argument(std::string("no dtype name for ") + c10::toString(t));
  }
}

at::ScalarType parse_dtype(const std::string& name, const std::string& where) {
  return scalar_type(util::parse_dtype(name, where));
}

std::string dtype_name(at::ScalarType t) { return util::dtype_name(dtype_of(t)); }

at::Device device_of(const util::DeviceName& d) {
  static_assert(util::kMaxDeviceIndex <= std::numeric_limits<c10::DeviceIndex>::max(),
                "the grammar's index limit must fit LibTorch's index type");
  return d.cuda ? at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(d.index)) : at::Device(at::kCPU);
}

at::Device parse_device_name(const std::string& name, const std::string& where) {
  // The grammar is checked by hand (util/device_list.h): c10's own parser reports a bad string with a C++ stack
  // trace and keeps an index in 8 bits, so cuda:256 would become cuda:0.
  return device_of(util::parse_one_device(name, where));
}

void check_device_available(at::Device d, const std::string& name, const std::string& where) {
  if (d.is_cpu()) return;
  const int64_t count = at::hasCUDA() ? int64_t(at::getNumGPUs()) : 0;
  if (count == 0)
    throw std::invalid_argument(where + ": " + util::quoted_device_text(name) + " asks for a CUDA device, but this " +
                                (at::hasCUDA() ? "machine has no GPU" : "build or machine has no CUDA"));
  if (d.index() >= count)
    throw std::invalid_argument(where + ": " + util::quoted_device_text(name) + " but this machine has " +
                                std::to_string(count) + " CUDA device(s) (cuda:0..cuda:" + std::to_string(count - 1) +
                                ", as CUDA_VISIBLE_DEVICES shows them)");
}

at::Device parse_device(const std::string& name, const std::string& where) {
  const at::Device d = parse_device_name(name, where);
  check_device_available(d, d.str(), name == d.str() ? where : where + " " + util::quoted_device_text(name));
  return d;
}

std::vector<at::Device> parse_devices(const std::string& list, const std::string& where) {
  return devices_of(util::read_device_list_setting(list, where), where);
}

std::vector<at::Device> devices_of(const util::DeviceListSetting& list, const std::string& where) {
  std::vector<at::Device> out;
  for (const util::DeviceName& d : list.devices) out.push_back(device_of(d));
  for (const at::Device& d : out)
    check_device_available(d, d.str(), d.str() == list.text ? where : where + " " + util::quoted_device_text(list.text));
  return out;
}

int64_t resolve_threads(int64_t n, const std::string& where) {
  if (n < 0 || n > kMaxThreads)
    throw std::invalid_argument(where + ": expected 0 (every core) to " + std::to_string(kMaxThreads) + ", got " +
                                std::to_string(n));
  return n > 0 ? n : std::max<int64_t>(1, std::thread::hardware_concurrency());
}

int64_t set_threads(int64_t n, const std::string& where) {
  const int64_t t = resolve_threads(n, where);
  at::set_num_threads(static_cast<int>(t));
  return t;
}

void set_thread_local_threads(int64_t n) {
  // First the lazy initialisations that would later reset this thread to the process-wide value
  // (parallel_threads.h): libtorch's (inside get_num_threads) and libdflash_ops's.
  (void)at::get_num_threads();
  init_parallel_threads_here();
  at::set_num_threads(static_cast<int>(std::max<int64_t>(1, n)));
}

int64_t device_memory_bytes(at::Device d) {
  if (d.is_cpu()) return util::total_memory_bytes();
  return int64_t(at::accelerator::getMemoryInfo(d.index()).second);
}

int64_t device_free_memory_bytes(at::Device d) {
  if (d.is_cpu()) return util::available_memory_bytes();
  return int64_t(at::accelerator::getMemoryInfo(d.index()).first);
}

}  // namespace dflash::ops
