#include "memory_fit.h"

#include <cstdlib>
#include <stdexcept>

#include "byte_size.h"
#include "compute_settings.h"

namespace dflash::plan {

double available_memory_bytes(at::Device device) {
  if (const char* s = std::getenv("DFLASH_TEST_AVAILABLE_MEMORY"); s && *s) {
    try {
      return util::parse_byte_size(s, "DFLASH_TEST_AVAILABLE_MEMORY").bytes;
    } catch (const std::invalid_argument&) {
      throw std::invalid_argument(std::string("DFLASH_TEST_AVAILABLE_MEMORY must be a size like 4GB or 512MB, of 1 "
                                              "byte to 1e18 bytes (a test-only switch), got '") + s + "'");
    }
  }
  return double(ops::device_free_memory_bytes(device));
}

DeviceFit device_fit(const MemoryPlan& plan, at::Device device, int64_t workers, double shared_bytes) {
  DeviceFit f;
  f.need_bytes = plan.peak_bytes + double(workers - 1) * (plan.peak_bytes - shared_bytes);
  f.available_bytes = available_memory_bytes(device);
  f.fits = f.need_bytes <= f.available_bytes;
  f.text = "planned peak " + util::human_bytes(plan.peak_bytes) + " per worker (at " + plan.peak_phase + ")" +
           (workers > 1 ? " x " + std::to_string(workers) + " workers = " + util::human_bytes(f.need_bytes) : "") +
           (f.fits ? " fits in " : " exceeds ") + util::human_bytes(f.available_bytes) +
           (device.is_cpu() ? " available" : " free") + " on " + device.str();
  return f;
}

void check_device_fit(const MemoryPlan& plan, at::Device device, int64_t workers, const std::string& what,
                      const std::string& hint, double shared_bytes) {
  const DeviceFit f = device_fit(plan, device, workers, shared_bytes);
  if (!f.fits) throw std::invalid_argument(what + ": " + f.text + " (refused before allocating); " + hint);
}

void check_step_shape(int64_t seq_len, int64_t anchors, const std::string& anchors_name, const std::string& seq_name) {
  if (anchors > seq_len)
    throw std::invalid_argument(anchors_name + " must be at most " + seq_name +
                                " (one anchor per context position), got " + std::to_string(anchors) +
                                " anchors for " + std::to_string(seq_len) + " positions");
}

}  // namespace dflash::plan
