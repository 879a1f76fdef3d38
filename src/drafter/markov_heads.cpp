#include "markov_heads.h"

#include <stdexcept>

namespace dflash::drafter {

std::optional<MarkovHeadType> markov_head_type_from_text(const std::string& s) {
  if (s == "vanilla") return MarkovHeadType::Vanilla;
  if (s == "gated") return MarkovHeadType::Gated;
  if (s == "rnn") return MarkovHeadType::Rnn;
  return std::nullopt;
}

const char* markov_head_type_name(MarkovHeadType t) {
  switch (t) {
    case MarkovHeadType::Gated: return "gated";
    case MarkovHeadType::Rnn: return "rnn";
    case MarkovHeadType::Vanilla: break;
  }
  return "vanilla";
}

void DSparkHeads::validate(const std::string& where) const {
  // Bounded so that V x r tables stay allocatable; DeepSpec uses 256.
  if (markov_rank < 0 || markov_rank > 65536)
    throw std::invalid_argument(where + ": field 'markov_rank': expected an integer in [0, 65536] (0: no Markov bias), got " +
                                std::to_string(markov_rank));
  if (markov_rank == 0 && markov_head_type != MarkovHeadType::Vanilla)
    throw std::invalid_argument(where + ": field 'markov_head_type': expected vanilla when markov_rank is 0 (gated and "
                                "rnn need a rank), got " + markov_head_type_name(markov_head_type));
}

}  // namespace dflash::drafter
