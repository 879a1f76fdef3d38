// `dflash train` settings files, JSON and YAML (the first byte picks which), then validate(): duplicate keys,
// second documents, types, integers that overflow, out-of-range values.
#include <cstdint>
#include <string>

#include "fuzz_common.h"
#include "train_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace dflash;
  if (size == 0) return 0;
  const std::string name = (data[0] & 1) ? "fuzz-config.yaml" : "fuzz-config.json";
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  train::TrainConfig c;
  bool applied = false;
  fuzz::expect_clean(name.c_str(), [&] {
    train::apply_config_text(c, text, name);
    applied = true;
  });
  if (applied) fuzz::expect_clean("train config", [&] { c.validate(); });
  return 0;
}
