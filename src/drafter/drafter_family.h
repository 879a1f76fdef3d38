// Which drafter family a run trains, evaluates or exports (docs/DSPARK.md, docs/DFLASH2.md): dflash (the DFlash backbone),
// dspark (DeepSpec's DSpark: DFlash + a low-rank previous-token "Markov" logit bias and a confidence head) or
// dflash2 (z-lab's DFlash2). One spelling, `drafter_family` / `--drafter-family`, parsed once into DrafterFamily;
// a drafter config.json names its family by `architectures`. DSpark's own settings, with DeepSpec's defaults
// (config/dspark/*.py), live in DSparkSettings. Torch-free.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

namespace dflash::drafter {

enum class DrafterFamily { DFlash, DSpark, DFlash2 };

inline constexpr const char* kDrafterFamilySpellings = "dflash, dspark or dflash2";
std::optional<DrafterFamily> drafter_family_from_text(const std::string& s);  // "dflash" | "dspark" | "dflash2"
const char* drafter_family_name(DrafterFamily f);
// config.json's architectures[0] for the family: DFlashDraftModel, Qwen3DSparkModel (DeepSpec's native name, the
// one SGLang and vLLM load; vLLM's DSparkDraftModel is a DeepSeek-V4 class), DFlash2DraftModel.
const char* drafter_family_architecture(DrafterFamily f);
std::optional<DrafterFamily> drafter_family_of_architecture(const std::string& architecture);

// The family a command runs with: `flag` as given ("" = not given) over the one its drafter config names
// (`from_config`, read from `config_where`). A flag that names another family than the config is an error
// ("<command>: --drafter-family dspark disagrees with <config_where> (dflash)"), as is a misspelt one.
DrafterFamily family_for_command(const std::string& command, const std::string& flag,
                                 std::optional<DrafterFamily> from_config, const std::string& config_where);

// Why `draft_vocab` must be 0 with family `f` (dspark, dflash2), in the words train, plan and bench step refuse it
// with (docs/DSPARK.md "Draft vocabulary", docs/DFLASH2.md). Empty for dflash, which has one.
const char* family_draft_vocab_refusal(DrafterFamily f);

enum class MarkovHeadType { Vanilla, Gated, Rnn };
inline constexpr const char* kMarkovHeadTypeSpellings = "vanilla, gated or rnn";
std::optional<MarkovHeadType> markov_head_type_from_text(const std::string& s);
const char* markov_head_type_name(MarkovHeadType t);

// The DSpark model's heads (part of the drafter: written in its config.json, flat, as DeepSpec writes them).
struct DSparkHeads {
  int64_t markov_rank = 256;  // r: W1, W2 are [V, r]; 0 = no Markov bias (the DFlash baseline with next-token labels)
  MarkovHeadType markov_head_type = MarkovHeadType::Vanilla;
  bool enable_confidence_head = true;
  bool confidence_head_with_markov = true;  // confidence input [h; W1[p]] rather than h

  // Throws std::invalid_argument "<where>: field '<name>': expected ..., got ..." (a head type other than vanilla
  // needs markov_rank > 0: gated and rnn gate W1[p], which has no columns at rank 0).
  void validate(const std::string& where) const;
  bool operator==(const DSparkHeads& o) const {
    return markov_rank == o.markov_rank && markov_head_type == o.markov_head_type &&
           enable_confidence_head == o.enable_confidence_head &&
           confidence_head_with_markov == o.confidence_head_with_markov;
  }
  bool operator!=(const DSparkHeads& o) const { return !(*this == o); }
};

// DSpark's objective weights: L = ce * CE(gold) + l1 * L1(q, pi) + confidence * BCE (DeepSpec 0.1 / 0.9 / 1.0),
// and its decay exp(-j/gamma) over all B slots (gamma 4).
inline constexpr double kDSparkCeWeight = 0.1, kDSparkL1Weight = 0.9, kDSparkConfidenceWeight = 1.0;
inline constexpr double kDSparkGamma = 4.0;

}  // namespace dflash::drafter
