#include "compute_settings.h"

#include <ATen/Context.h>
#include <ATen/DeviceAccelerator.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <limits>
#include <stdexcept>
#include <thread>

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

at::Device parse_device_name(const std::string& name, const std::string& where) {
  // Checked by hand first: c10's own parser reports a bad string with a C++ stack trace.
  const auto colon = name.find(':');
  const std::string type = name.substr(0, colon), index = colon == std::string::npos ? "" : name.substr(colon + 1);
  const bool index_ok = colon == std::string::npos ||
                        (!index.empty() && index.size() <= 3 && index.find_first_not_of("0123456789") == std::string::npos);
  if ((type != "cpu" && type != "cuda") || !index_ok || (type == "cpu" && colon != std::string::npos && index != "0"))
    throw std::invalid_argument(where + ": expected a device like cpu, cuda or cuda:1, got '" + name + "'");
  if (type == "cpu") return at::Device(at::kCPU);
  // The index type is 8 bits: a larger index would wrap onto another device (cuda:256 -> cuda:0) or go negative.
  const long long i = index.empty() ? 0 : std::stoll(index);
  if (i > std::numeric_limits<c10::DeviceIndex>::max())
    throw std::invalid_argument(where + ": '" + name + "': a CUDA device index is at most " +
                                std::to_string(int(std::numeric_limits<c10::DeviceIndex>::max())));
  return at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(i));
}

void check_device_available(at::Device d, const std::string& name, const std::string& where) {
  if (d.is_cpu()) return;
  const int64_t count = at::hasCUDA() ? int64_t(at::getNumGPUs()) : 0;
  if (count == 0)
    throw std::invalid_argument(where + ": '" + name + "' asks for a CUDA device, but this " +
                                (at::hasCUDA() ? "machine has no GPU" : "build or machine has no CUDA"));
  if (d.index() >= count)
    throw std::invalid_argument(where + ": '" + name + "' but this machine has " + std::to_string(count) +
                                " CUDA device(s) (cuda:0..cuda:" + std::to_string(count - 1) + ")");
}

at::Device parse_device(const std::string& name, const std::string& where) {
  const at::Device d = parse_device_name(name, where);
  check_device_available(d, name, where);
  return d;
}

std::vector<at::Device> parse_devices(const std::string& list, const std::string& where) {
  std::vector<at::Device> out;
  size_t start = 0;
  while (start <= list.size()) {
    const size_t comma = std::min(list.find(',', start), list.size());
    const std::string item = list.substr(start, comma - start);
    if (item.empty() && !list.empty())  // 'cuda:0,,cuda:1' or a trailing ',': a typo, not a device to skip
      throw std::invalid_argument(where + ": an empty entry in '" + list + "'");
    if (!item.empty()) out.push_back(parse_device(item, where));
    start = comma + 1;
  }
  if (out.empty()) throw std::invalid_argument(where + ": needs at least one device, e.g. cpu or cuda:0");
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
