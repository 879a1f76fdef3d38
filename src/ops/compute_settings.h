// The LibTorch settings every computing command shares, parsed in one place so a mistake is a one-line
// error naming the flag instead of a LibTorch stack trace: dtype names (util/dtype_names.h), device strings
// ("cpu", "cuda", "cuda:1"; a CUDA device on a machine without one is refused), and intra-op threads.
#pragma once
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <cstdint>
#include <string>
#include <vector>

namespace dflash::ops {

at::ScalarType parse_dtype(const std::string& name, const std::string& where);
// The canonical short name ("fp32", "bf16", "fp16", "fp64") of a floating dtype.
std::string dtype_name(at::ScalarType t);

at::Device parse_device(const std::string& name, const std::string& where);
// A comma list of devices; at least one.
std::vector<at::Device> parse_devices(const std::string& list, const std::string& where);

// The largest --threads accepted (more threads than this only oversubscribe and can stall start-up).
inline constexpr int64_t kMaxThreads = 1024;
// Intra-op threads: n > 0 as given, 0 = every core of the machine. Out of range is an error naming `where`.
int64_t resolve_threads(int64_t n, const std::string& where);
// resolve_threads() and apply it to LibTorch's pool; returns the count set.
int64_t set_threads(int64_t n, const std::string& where);

}  // namespace dflash::ops
