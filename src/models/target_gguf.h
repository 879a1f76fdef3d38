// Loading a target from a llama.cpp GGUF file, for the architectures whose row names a GGUF form
// (TargetArchInfo::gguf: Llama, Qwen3, Qwen3-MoE): the config from GGUF metadata, tensors dequantised to float and
// renamed to Hugging Face names; Q/K rows un-permuted where the row says llama.cpp's converter permuted them; the
// stacked expert tensors fused as the MoE block runs them where the row has routed experts (target_gguf_moe.h).
#pragma once
#include <string>

#include "gguf.h"
#include "target_model.h"

namespace dflash::models {

// "blk.3.attn_q.weight" -> "model.layers.3.self_attn.q_proj.weight"; "" for names with no HF counterpart.
std::string gguf_to_hf_name(const std::string& gguf_name);

// Architecture from the `<arch>.*` metadata keys (arch = general.architecture, one of the rows' gguf.arch).
TargetConfig gguf_target_config(const io::GGUFFile& file);

TargetModel load_gguf_target(const std::string& path, const TargetLoadOptions& options = {});

}  // namespace dflash::models
