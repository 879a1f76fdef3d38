// Which serving engines read an exported drafter exactly as it was trained (issue 38, docs/SERVING.md): one row per
// (drafter family, engine), each family's rows its own (family.h: Family::engine_rules(), in its folder).
// `dflash export --engine` refuses an export that a named engine would read differently; `dflash train --draft-vocab`
// says at start which engines can serve its result. The rule lives in the drafter layer (not src/export) because
// train, below export, reads it too; tests/python/test_export_engines.py checks every row against
// tests/python/engine_readers.py.
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
  // DSpark's heads (markov_heads.h's DSparkHeads; describe_for_engines fills them):
  std::string markov_head_type = "vanilla";
  int64_t markov_rank = 256;
  bool confidence_head = true;
  bool confidence_with_markov = true;  // the confidence head reads [h; W1[prev]] (confidence_head_with_markov)
  bool sliding_layers = false;  // some layer_types entry is sliding_attention
  // DFlash2's selector:
  int64_t hidden_size = 0;
  int64_t selector_top_k = 0;
};

// One engine's row of a family: a column applies only where the export has that trait (a family without the trait
// leaves its column nullptr).
struct EngineRule {
  const char* engine;       // the --engine name
  const char* draft_vocab;  // nullptr: lm_head + d2t are read as trained; else what the engine does instead
  const char* last_layer;   // nullptr: a last-layer feature is read as trained; else why not
  // DSpark's heads: nullptr = read as trained; else what the engine does instead
  const char* markov_variant = nullptr;  // a gated or rnn Markov head
  const char* rank_zero = nullptr;       // markov_rank 0 (no Markov head)
  const char* no_confidence = nullptr;   // enable_confidence_head false
  const char* confidence_without_markov = nullptr;  // a confidence head with confidence_head_with_markov false
  // DFlash2's selector: nullptr = any selector_top_k is read as trained; else what happens when
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

// The engines that serve `family` (those with a row in its Family::engine_rules()), in engine_names() order.
std::vector<std::string> engines_for_family(const std::string& family);

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

// Why `engine` would read an export with traits `t` differently from what was trained ("" = it reads it as trained),
// from the rows of the family t.family names.
std::string engine_refusal(const ExportTraits& t, const std::string& engine);

// The engines of engine_names() that read an export with traits `t` as it was trained.
std::vector<std::string> engines_serving(const ExportTraits& t);

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
