// Llama (transformers' LlamaConfig): dense attention and SwiGLU MLPs, optional biases. A llama.cpp GGUF stores its
// q/k rows permuted for interleaved RoPE (its row's gguf.permuted_qk: target_gguf.cpp undoes it).
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
  static const TargetArchRow row = [] {
    TargetArchRow r{{TargetArch::llama, "llama", {"llama"}, /*gguf=*/{"llama"}, /*hf_class=*/"LlamaForCausalLM"}, parse};
    r.info.gguf.permuted_qk = true;  // llama.cpp's Llama converter interleaves each head's q/k rows for its RoPE
    r.info.mlp_bias_field = true;    // LlamaConfig reads mlp_bias
    return r;
  }();
  return row;
}

}  // namespace dflash::models
