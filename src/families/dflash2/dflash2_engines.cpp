#include "dflash2_engines.h"

namespace dflash::families {

using drafter::kLlamaCppSliding;

std::vector<drafter::EngineRule> dflash2_engine_rules() {
  return {
    // DFlash2 in z-lab's contract (DFlash2DraftModel; conv and selector settings in dflash_config, is_causal false).
    // Speculators has no DFlash2 converter. train refuses a draft vocabulary with dflash2, and every family refuses
    // the target's last layer, so these columns describe the engines but are not reached by a run. What the
    // folder cannot say is in docs/SERVING.md: vLLM's serving block (1 + num_speculative_tokens) must equal the
    // trained block_size (the convs run block-local), and llama.cpp drafts greedily only.
    {"sglang", "drafts with the target's LM head, ignoring lm_head/d2t/t2d without a word",
     "no capture point at index L: fewer features than fc expects"},
    {"vllm", nullptr, "the aux layer L is never captured: fewer features than fc expects"},
    {"llama.cpp", "a drafter GGUF shares the target's vocabulary: the draft head does not fit, d2t is dropped",
     "it captures the layer output before the final norm, not the final-normed state trained on", nullptr, nullptr,
     nullptr, nullptr,
     "its loader stores each slot's top-k x top-k selector lattice in a hidden-size row and throws unless "
     "hidden_size >= selector_top_k * (selector_top_k + 1)",
     kLlamaCppSliding},
    {"zlab", "drafts with the target's embedding and LM head: lm_head/d2t/t2d unused", nullptr},
  };
}

}  // namespace dflash::families
