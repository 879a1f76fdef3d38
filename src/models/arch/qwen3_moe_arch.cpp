// Qwen3-MoE (transformers' Qwen3MoeConfig): Qwen3's attention; layer i's MLP routed to top_k experts when
// (i + 1) % decoder_sparse_step == 0 and i is not in mlp_only_layers (intermediate_size is then optional when
// every layer is routed). Its experts: per expert or fused (moe_weights.h); in GGUF, stacked (target_gguf_moe.h).
#include "arch_fields.h"
#include "arch_rows.h"

namespace dflash::models {
namespace {

using namespace arch;

void parse(const json& j, const std::string&, const std::string& what, TargetConfig& c) {
  c.qk_norm = true;
  parse_decoder_fields(j, what, c, /*dense_mlp_required=*/false);
  parse_moe_fields(j, what, c, /*shared_expert=*/false);
  check_full_attention_only(j, what);
}

}  // namespace

const TargetArchRow& qwen3_moe_arch() {
  static const TargetArchRow row{{TargetArch::qwen3_moe, "qwen3_moe", {"qwen3_moe"},
                                  /*gguf=*/{"qwen3moe", /*qk_norm=*/true, /*experts=*/true},
                                  /*hf_class=*/"Qwen3MoeForCausalLM"},
                                 parse};
  return row;
}

}  // namespace dflash::models
