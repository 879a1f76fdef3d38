// The `dflash` commands of the io layer: inspect and validate weight files.
#pragma once
#include <string>
#include <vector>

#include "subcommand.h"

namespace dflash::io {

int safetensors_info_main(const std::vector<std::string>& args);
int safetensors_copy_main(const std::vector<std::string>& args);
int gguf_info_main(const std::vector<std::string>& args);
int gguf_dequant_main(const std::vector<std::string>& args);

inline std::vector<util::Subcommand> commands() {
  return {
      {{"safetensors", "info"}, "validate a safetensors file and list its tensors", &safetensors_info_main},
      {{"safetensors", "copy"}, "re-write a safetensors file through the dflash reader and writer", &safetensors_copy_main},
      {{"gguf", "info"}, "validate a GGUF file and print its metadata and tensors", &gguf_info_main},
      {{"gguf", "dequant"}, "write one GGUF tensor dequantised to raw float32", &gguf_dequant_main},
  };
}

}  // namespace dflash::io
