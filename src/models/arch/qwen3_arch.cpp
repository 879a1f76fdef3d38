// Dense Qwen3 (transformers' Qwen3Config): Llama's layers plus a per-head RMSNorm on q and k before RoPE.
#include "arch_fields.h"
#include "arch_rows.h"

namespace dflash::models {
namespace {

using namespace arch;

void parse(const json& j, const std::string&, const std::string& what, TargetConfig& c) {
  c.qk_norm = true;
  parse_decoder_fields(j, what, c);
  check_full_attention_only(j, what);
}

}  // namespace

const TargetArchRow& qwen3_arch() {
  static const TargetArchRow row{{TargetArch::qwen3, "qwen3", {"qwen3"}, /*gguf=*/{"qwen3", /*qk_norm=*/true},
                                  /*hf_class=*/"Qwen3ForCausalLM"},
                                 parse};
  return row;
}

}  // namespace dflash::models
