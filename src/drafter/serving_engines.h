// Which serving engines read an exported drafter exactly as it was trained (issue 38, docs/SERVING.md): one table,
// one row per (drafter family, engine). `dflash export --engine` refuses an export that a named engine would read
// differently; `dflash train --draft-vocab` says at start which engines can serve its result. The table lives in the
// drafter layer (not src/export) because train, below export, reads it too. A new family (DSpark, DFlash2) adds its
// rows here; tests/python/test_export_engines.py checks every row against tests/python/engine_readers.py.
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace dflash::drafter {

// What an export has that an engine may read differently from the trainer.
struct ExportTraits {
  std::string family = "dflash";   // the drafter family of the run
  bool draft_vocab = false;         // a reduced drafting vocabulary: lm_head [K, H] + d2t + t2d
  bool last_target_layer = false;   // target_layer_ids lists the target's last layer
  // dspark only (drafter_family.h's DSparkHeads):
  std::string markov_head_type = "vanilla";
  int64_t markov_rank = 256;
  bool confidence_head = true;
  bool confidence_with_markov = true;  // the confidence head reads [h; W1[prev]] (confidence_head_with_markov)
  bool sliding_layers = false;  // some layer_types entry is sliding_attention
  // dflash2 only:
  int64_t hidden_size = 0;
  int64_t selector_top_k = 0;
};

struct EngineRule {
  const char* engine;       // the --engine name
  const char* family;       // the family this row is about
  const char* draft_vocab;  // nullptr: lm_head + d2t are read as trained; else what the engine does instead
  const char* last_layer;   // nullptr: a last-layer feature is read as trained; else why not
  // dspark rows: nullptr = read as trained; else what the engine does instead
  const char* markov_variant = nullptr;  // a gated or rnn Markov head
  const char* rank_zero = nullptr;       // markov_rank 0 (no Markov head)
  const char* no_confidence = nullptr;   // enable_confidence_head false
  const char* confidence_without_markov = nullptr;  // a confidence head with confidence_head_with_markov false
  // dflash2 rows: nullptr = any selector_top_k is read as trained; else what happens when
  // hidden_size < selector_top_k * (selector_top_k + 1)
  const char* small_selector_lattice = nullptr;
  const char* sliding = nullptr;  // any family: nullptr = sliding_attention layers are read as trained
};

// llama.cpp's drafter context has one causal flag (dflash.attention.causal, from is_causal; absent: non-causal):
// every layer gets it, while our sliding layers are causal inside the block and full layers bidirectional.
inline constexpr const char* kLlamaCppSliding =
    "it has one causal flag for every layer (is_causal; absent: non-causal), so sliding_attention layers, trained "
    "causal inside the block, attend both ways there";

// The engines `--engine all` names, in the order errors list them.
inline const std::vector<std::string>& engine_names() {
  static const std::vector<std::string> names = {"sglang", "vllm", "llama.cpp", "zlab", "speculators"};
  return names;
}

// Engines capture a layer's output before the target's final norm, as hidden-state index id + 1 (past the end for
// the last layer); our feature of the last layer is the final-normed state (HF hidden_states[-1]).
inline constexpr const char* kLastLayerWhy =
    "our feature there is the final-normed state (HF hidden_states[-1]); engines capture layer outputs before the "
    "final norm at hidden-state index id + 1, past the last layer";

inline const std::vector<EngineRule>& engine_rules() {
  static const std::vector<EngineRule> rules = {
      {"sglang", "dflash", "drafts with the target's LM head, ignoring lm_head/d2t/t2d without a word",
       "no capture point at index L: fewer features than fc expects"},
      {"vllm", "dflash", nullptr, "the aux layer L is never captured: fewer features than fc expects"},
      {"llama.cpp", "dflash", "a drafter GGUF shares the target's vocabulary: the draft head does not fit, d2t is dropped",
       "it captures the layer output before the final norm, not the final-normed state trained on", nullptr, nullptr,
       nullptr, nullptr, nullptr, kLlamaCppSliding},
      {"zlab", "dflash", "drafts with the target's embedding and LM head: lm_head/d2t/t2d unused", nullptr},
      {"speculators", "dflash", "the converter fails on the draft head's shape",
       "the converter drops the verifier's last layer, then fc no longer fits"},
      // DSpark in DeepSpec's native contract (Qwen3DSparkModel, flat keys); z-lab and speculators do not serve it.
      // train refuses a draft vocabulary with dspark, so the draft_vocab column is never reached for these rows.
      {"sglang", "dspark", "drafts with the target's LM head, ignoring lm_head/d2t/t2d without a word",
       "no capture point at index L: fewer features than fc expects", nullptr,
       "DSpark requires markov_rank > 0", "builds the confidence head anyway and requires its weights"},
      {"vllm", "dspark", nullptr, "the aux layer L is never captured: fewer features than fc expects",
       "builds the vanilla Markov head only", "builds W1/W2 of rank markov_rank: nothing to load at rank 0", nullptr},
      // llama.cpp: what its converter (conversion/qwen.py DSparkModel) and loader (src/models/dflash.cpp) do,
      // found by running them (tests/python/test_llama_cpp_engine.py).
      {"llama.cpp", "dspark", "a drafter GGUF shares the target's vocabulary: the draft head does not fit, d2t is dropped",
       "it captures the layer output before the final norm, not the final-normed state trained on",
       "its converter refuses every Markov head but vanilla",
       "without markov_w1/markov_w2 it loads the drafter as DFlash, drafting from the slot after the anchor", nullptr,
       "its loader wants conf_proj over [h; W1[prev]] (hidden + markov_rank inputs) and fails on the shape", nullptr,
       kLlamaCppSliding},
      // DFlash2 in z-lab's contract (DFlash2DraftModel; conv and selector settings in dflash_config, is_causal false).
      // Speculators has no DFlash2 converter. train refuses a draft vocabulary with dflash2, and every family refuses
      // the target's last layer, so these columns describe the engines but are not reached by a run. What the
      // folder cannot say is in docs/SERVING.md: vLLM's serving block (1 + num_speculative_tokens) must equal the
      // trained block_size (the convs run block-local), and llama.cpp drafts greedily only.
      {"sglang", "dflash2", "drafts with the target's LM head, ignoring lm_head/d2t/t2d without a word",
       "no capture point at index L: fewer features than fc expects"},
      {"vllm", "dflash2", nullptr, "the aux layer L is never captured: fewer features than fc expects"},
      {"llama.cpp", "dflash2",
       "a drafter GGUF shares the target's vocabulary: the draft head does not fit, d2t is dropped",
       "it captures the layer output before the final norm, not the final-normed state trained on", nullptr, nullptr,
       nullptr, nullptr,
       "its loader stores each slot's top-k x top-k selector lattice in a hidden-size row and throws unless "
       "hidden_size >= selector_top_k * (selector_top_k + 1)",
       kLlamaCppSliding},
      {"zlab", "dflash2", "drafts with the target's embedding and LM head: lm_head/d2t/t2d unused", nullptr},
  };
  return rules;
}

// The engines that serve `family` (those with a row for it), in engine_names() order.
inline std::vector<std::string> engines_for_family(const std::string& family) {
  std::vector<std::string> out;
  for (const auto& e : engine_names())
    for (const auto& r : engine_rules())
      if (e == r.engine && family == r.family) {
        out.push_back(e);
        break;
      }
  return out;
}

// `--engine`: "all" or a comma list of engine_names().
inline std::vector<std::string> parse_engine_list(const std::string& flag, const std::string& where) {
  if (flag == "all") return engine_names();
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    const size_t comma = flag.find(',', start);
    const std::string name = flag.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    bool known = false;
    for (const auto& e : engine_names()) known |= e == name;
    if (!known) {
      std::string all;
      for (const auto& e : engine_names()) all += "|" + e;
      throw std::invalid_argument(where + ": expected all" + all + " (or a comma list of them), got '" + flag + "'");
    }
    bool seen = false;
    for (const auto& e : out) seen |= e == name;
    if (!seen) out.push_back(name);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

// Why `engine` would read an export with traits `t` differently from what was trained ("" = it reads it as trained).
inline std::string engine_refusal(const ExportTraits& t, const std::string& engine) {
  const EngineRule* row = nullptr;
  for (const auto& r : engine_rules())
    if (engine == r.engine && t.family == r.family) row = &r;
  if (!row) return "does not serve the " + t.family + " family";
  std::string why;
  if (t.draft_vocab && row->draft_vocab) why = std::string("draft vocabulary: ") + row->draft_vocab;
  if (t.last_target_layer && row->last_layer)
    (why += why.empty() ? "" : "; ") += std::string("the target's last layer as a feature: ") + row->last_layer;
  if (t.family == "dspark") {
    auto add = [&](bool applies, const char* what, const std::string& label) {
      if (applies && what) (why += why.empty() ? "" : "; ") += label + ": " + what;
    };
    add(t.markov_head_type != "vanilla", row->markov_variant, "a " + t.markov_head_type + " Markov head");
    add(t.markov_rank == 0, row->rank_zero, "markov_rank 0");
    add(!t.confidence_head, row->no_confidence, "no confidence head");
    add(t.confidence_head && !t.confidence_with_markov, row->confidence_without_markov,
        "confidence_head_with_markov false");
  }
  if (t.sliding_layers && row->sliding)
    (why += why.empty() ? "" : "; ") += std::string("sliding layers: ") + row->sliding;
  if (t.family == "dflash2" && t.selector_top_k > 0 && row->small_selector_lattice &&
      t.hidden_size < t.selector_top_k * (t.selector_top_k + 1))
    (why += why.empty() ? "" : "; ") += "selector_top_k " + std::to_string(t.selector_top_k) + " at hidden_size " +
                                        std::to_string(t.hidden_size) + ": " + row->small_selector_lattice;
  return why;
}

// The engines of engine_names() that read an export with traits `t` as it was trained.
inline std::vector<std::string> engines_serving(const ExportTraits& t) {
  std::vector<std::string> out;
  for (const auto& e : engine_names())
    if (engine_refusal(t, e).empty()) out.push_back(e);
  return out;
}

inline std::string join_engines(const std::vector<std::string>& names) {
  std::string s;
  for (const auto& n : names) (s += s.empty() ? "" : ", ") += n;
  return s.empty() ? "none" : s;
}

// Refuses target_layer_ids that include the target's last layer (kLastLayerWhy); `where` names the flag or file.
inline void check_capturable_layer_ids(const std::vector<int64_t>& ids, int64_t num_target_layers,
                                       const std::string& where) {
  for (auto id : ids)
    if (num_target_layers > 0 && id == num_target_layers - 1)
      throw std::invalid_argument(where + ": target layer " + std::to_string(id) + " is the target's last layer (of " +
                                  std::to_string(num_target_layers) + "): refused, " + kLastLayerWhy +
                                  "; use layers below " + std::to_string(id));
}

}  // namespace dflash::drafter
