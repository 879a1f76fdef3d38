// cuda_compiled_archs() against the code the CUDA kernels' library actually holds. The images are read from the
// fat binaries nvcc embeds (the layout cuobjdump --list-elf / --list-ptx reads, which this toolkit lacks): a
// container header {u32 magic 0xBA55ED50, u16 version, u16 header size, u64 size} followed by images, each with
// a header {u16 kind (1 PTX, 2 machine code), u16, u32 header size, u64 payload size, ..., u32 arch at byte 28}.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "cuda_build_info.h"

namespace {

// "sm_80", "compute_120", ... for every image of every fat binary in the file.
std::set<std::string> fatbin_images(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  const std::vector<char> data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto u16 = [&](size_t at) { uint16_t v; std::memcpy(&v, &data[at], 2); return v; };
  auto u32 = [&](size_t at) { uint32_t v; std::memcpy(&v, &data[at], 4); return v; };
  auto u64 = [&](size_t at) { uint64_t v; std::memcpy(&v, &data[at], 8); return v; };
  std::set<std::string> images;
  for (size_t at = 0; at + 16 <= data.size(); ++at) {
    if (u32(at) != 0xBA55ED50u || u16(at + 4) != 1 || u16(at + 6) != 16) continue;
    const size_t end = at + 16 + u64(at + 8);
    for (size_t e = at + 16; e + 32 <= end && end <= data.size();) {
      const uint16_t kind = u16(e);
      const std::string arch = std::to_string(u32(e + 28));
      if (kind == 1) images.insert("compute_" + arch);
      if (kind == 2) images.insert("sm_" + arch);
      e += u32(e + 4) + u64(e + 8);
    }
    at = end - 1;
  }
  return images;
}

std::set<std::string> words(const std::string& s) {
  std::istringstream in(s);
  return {std::istream_iterator<std::string>(in), std::istream_iterator<std::string>()};
}

}  // namespace

TEST(CudaBuildInfo, TheKernelsHoldTheCodeTheBuildReports) {
#ifdef DFLASH_CUDA_KERNELS_LIB
  const std::set<std::string> reported = words(dflash::kernels::cuda_compiled_archs());
  ASSERT_FALSE(reported.empty());
  EXPECT_EQ(fatbin_images(DFLASH_CUDA_KERNELS_LIB), reported) << DFLASH_CUDA_KERNELS_LIB;
  // Machine code first, then PTX (of the newest), as the string promises.
  const std::string s = dflash::kernels::cuda_compiled_archs();
  EXPECT_EQ(s.find("compute_"), s.rfind("compute_")) << s;
  EXPECT_GT(s.find("compute_"), s.rfind("sm_")) << s;
#else
  EXPECT_EQ(dflash::kernels::cuda_compiled_archs(), "");
#endif
}
