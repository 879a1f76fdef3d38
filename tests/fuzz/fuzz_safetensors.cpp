// safetensors: the 8-byte header length, the JSON header and the data layout (parse_safetensors_bytes is what
// SafetensorsFile::open runs on a file). Property: a file that is accepted is re-written by our header writer
// into a header that is accepted again, with the same tensors.
#include <cstdint>

#include "fuzz_common.h"
#include "safetensors_header.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace dflash;
  fuzz::expect_clean("fuzz.safetensors", [&] {
    const io::SafetensorsHeader h = io::parse_safetensors_bytes(data, size, "file 'fuzz.safetensors'");
    const std::string again = io::build_safetensors_header(h.entries, h.metadata);
    const io::SafetensorsHeader h2 = io::parse_safetensors_header(again, h.file_size - h.data_start, "file 'fuzz.safetensors' (rewritten)");
    if (h2.entries.size() != h.entries.size() || h2.metadata != h.metadata) fuzz::violated("round trip changed the header");
    for (size_t i = 0; i < h.entries.size(); ++i)
      if (h2.entries[i].name != h.entries[i].name || h2.entries[i].begin != h.entries[i].begin ||
          h2.entries[i].shape != h.entries[i].shape)
        fuzz::violated("round trip changed tensor " + h.entries[i].name);
  });
  return 0;
}
