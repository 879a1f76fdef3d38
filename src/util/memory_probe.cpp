#include "memory_probe.h"

#include <malloc.h>

#include <fstream>
#include <string>

namespace dflash::util {
namespace {

// Reads a "Name:   123 kB" line of a /proc file, in bytes; -1 when absent.
int64_t proc_kb_field(const char* path, const std::string& name) {
  std::ifstream f(path);
  std::string key;
  while (f >> key) {
    if (key == name + ":") {
      int64_t kb = 0;
      f >> kb;
      return kb * 1024;
    }
    std::getline(f, key);
  }
  return -1;
}

}  // namespace

void PeakRss::configure_allocator() {
  // A fixed threshold stops glibc from raising it after frees, so big tensors always come from
  // mmap and go back to the OS when freed; otherwise reused heap hides later peaks.
  mallopt(M_MMAP_THRESHOLD, 1 << 20);
}

void PeakRss::reset() {
  malloc_trim(0);
  std::ofstream("/proc/self/clear_refs") << "5";
  baseline_ = current_rss_bytes();
}

int64_t PeakRss::peak_extra_bytes() const {
  const int64_t hwm = proc_kb_field("/proc/self/status", "VmHWM");
  return hwm < 0 ? -1 : std::max<int64_t>(0, hwm - baseline_);
}

int64_t current_rss_bytes() { return proc_kb_field("/proc/self/status", "VmRSS"); }
int64_t available_memory_bytes() { return proc_kb_field("/proc/meminfo", "MemAvailable"); }
int64_t total_memory_bytes() { return proc_kb_field("/proc/meminfo", "MemTotal"); }

}  // namespace dflash::util
