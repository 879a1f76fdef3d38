// Llama (transformers' LlamaConfig): dense attention and SwiGLU MLPs, optional biases. A llama.cpp GGUF stores its
// q/k rows permuted for interleaved RoPE (target_gguf.cpp undoes it for this architecture).
#include "arch_fields.h"
#include "arch_rows.h"

namespace dflash::models {
namespace {

using namespace arch;

void parse(const json& j, const std::string&, const std::string& what, TargetConfig& c) {
  parse_decoder_fields(j, what, c);
  check_full_attention_only(j, what);
}

}  // namespace

const TargetArchRow& llama_arch() {
  static const TargetArchRow row{{TargetArch::llama, "llama", {"llama"}, /*gguf=*/"llama", /*hf_class=*/"LlamaForCausalLM"}, parse};
  return row;
}

}  // namespace dflash::models
