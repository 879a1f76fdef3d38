// The LibTorch settings every computing command shares, parsed in one place so a mistake is a one-line
// error naming the flag instead of a LibTorch stack trace: dtype names (util/dtype_names.h), device strings
// ("cpu", "cuda", "cuda:1"; a CUDA device on a machine without one is refused), and intra-op threads.
#pragma once
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <cstdint>
#include <string>
#include <vector>

#include "device_list.h"
#include "dtype_names.h"

namespace dflash::ops {

// LibTorch's type of a dtype (util/dtype_names.h reads the names), and back (a floating type only).
at::ScalarType scalar_type(util::Dtype d);
util::Dtype dtype_of(at::ScalarType t);
// scalar_type(util::parse_dtype(name, where)): a flag straight to LibTorch's type.
at::ScalarType parse_dtype(const std::string& name, const std::string& where);
// The canonical short name ("fp32", "bf16", "fp16", "fp64") of a floating dtype.
std::string dtype_name(at::ScalarType t);

// Devices in the grammar of util/device_list.h; errors are one line naming `where` and the entry (a list's
// callers pass `where` naming the list too). One device ("cpu", "cuda", "cuda:N") that this machine has.
at::Device parse_device(const std::string& name, const std::string& where);
// parse_device in two halves: the spelling only ("cpu", "cuda", "cuda:N"), then whether this machine has it.
at::Device parse_device_name(const std::string& name, const std::string& where);
void check_device_available(at::Device d, const std::string& name, const std::string& where);
// A device of the grammar's parse as LibTorch's (no check that this machine has it).
at::Device device_of(const util::DeviceName& d);
// A comma list of devices, one worker each: at least one, no empty entry, no ';', each on this machine.
std::vector<at::Device> parse_devices(const std::string& list, const std::string& where);
// The same for a list parsed already (a train setting): its devices, each checked to exist (errors quote its text).
std::vector<at::Device> devices_of(const util::DeviceListSetting& list, const std::string& where);

// The largest --threads accepted (more threads than this only oversubscribe and can stall start-up).
inline constexpr int64_t kMaxThreads = 1024;
// Intra-op threads: n > 0 as given, 0 = every core of the machine. Out of range is an error naming `where`.
int64_t resolve_threads(int64_t n, const std::string& where);
// resolve_threads() and apply it to LibTorch's pool; returns the count set.
int64_t set_threads(int64_t n, const std::string& where);
// Intra-op threads of the calling thread only (n >= 1), for threads that compute side by side (target replicas,
// pipeline stages, drafter workers). LibTorch's OpenMP pool size is per thread, but a thread takes the
// process-wide value last set by any thread on its first parallel op (once per library: parallel_threads.h);
// this runs those first, so `n` stays whatever other threads set.
void set_thread_local_threads(int64_t n);

// Total memory of a device in bytes: the GPU's (CUDA) or the machine's RAM (CPU).
int64_t device_memory_bytes(at::Device d);
// What a new allocation can still get: the GPU's free memory (CUDA) or the RAM the kernel calls available (CPU).
int64_t device_free_memory_bytes(at::Device d);

}  // namespace dflash::ops
