#include "dflash_engines.h"

namespace dflash::families {

using drafter::kLlamaCppSliding;

std::vector<drafter::EngineRule> dflash_engine_rules() {
  return {
    {"sglang", "drafts with the target's LM head, ignoring lm_head/d2t/t2d without a word",
     "no capture point at index L: fewer features than fc expects"},
    {"vllm", nullptr, "the aux layer L is never captured: fewer features than fc expects"},
    {"llama.cpp", "a drafter GGUF shares the target's vocabulary: the draft head does not fit, d2t is dropped",
     "it captures the layer output before the final norm, not the final-normed state trained on", nullptr, nullptr,
     nullptr, nullptr, nullptr, kLlamaCppSliding},
    {"zlab", "drafts with the target's embedding and LM head: lm_head/d2t/t2d unused", nullptr},
    {"speculators", "the converter fails on the draft head's shape",
     "the converter drops the verifier's last layer, then fc no longer fits"},
  };
}

}  // namespace dflash::families
