// Peak memory of a piece of work, as the OS sees it (Linux): the resident-set high-water mark after
// a reset, minus the resident set at the reset. Works for any allocator that returns memory to the
// OS, which configure_allocator() arranges for glibc malloc (large blocks are mmapped and unmapped).
#pragma once
#include <cstdint>

namespace dflash::util {

class PeakRss {
 public:
  // Call once at program start, before large allocations.
  static void configure_allocator();
  // Trims free heap memory, resets the kernel's high-water mark and records the baseline.
  void reset();
  // Bytes the process grew to at most since reset(), above the baseline.
  int64_t peak_extra_bytes() const;

 private:
  int64_t baseline_ = 0;
};

int64_t current_rss_bytes();
int64_t available_memory_bytes();  // MemAvailable from /proc/meminfo
int64_t total_memory_bytes();      // MemTotal from /proc/meminfo

}  // namespace dflash::util
