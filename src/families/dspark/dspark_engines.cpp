#include "dspark_engines.h"

namespace dflash::families {

using drafter::kLlamaCppSliding;

std::vector<drafter::EngineRule> dspark_engine_rules() {
  return {
    // DSpark in DeepSpec's native contract (Qwen3DSparkModel, flat keys); z-lab and speculators do not serve it.
    // train refuses a draft vocabulary with dspark, so the draft_vocab column is never reached for these rows.
    {"sglang", "drafts with the target's LM head, ignoring lm_head/d2t/t2d without a word",
     "no capture point at index L: fewer features than fc expects", nullptr,
     "DSpark requires markov_rank > 0", "builds the confidence head anyway and requires its weights"},
    {"vllm", nullptr, "the aux layer L is never captured: fewer features than fc expects",
     "builds the vanilla Markov head only", "builds W1/W2 of rank markov_rank: nothing to load at rank 0", nullptr},
    // llama.cpp: what its converter (conversion/qwen.py DSparkModel) and loader (src/models/dflash.cpp) do,
    // found by running them (tests/python/test_llama_cpp_engine.py).
    {"llama.cpp", "a drafter GGUF shares the target's vocabulary: the draft head does not fit, d2t is dropped",
     "it captures the layer output before the final norm, not the final-normed state trained on",
     "its converter refuses every Markov head but vanilla",
     "without markov_w1/markov_w2 it loads the drafter as DFlash, drafting from the slot after the anchor", nullptr,
     "its loader wants conf_proj over [h; W1[prev]] (hidden + markov_rank inputs) and fails on the shape", nullptr,
     kLlamaCppSliding},
  };
}

}  // namespace dflash::families
