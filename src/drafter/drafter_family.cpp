#include "drafter_family.h"

#include <stdexcept>

#include "family_registry.h"

namespace dflash::drafter {

std::optional<DrafterFamily> drafter_family_from_text(const std::string& s) {
  if (s == "dflash") return DrafterFamily::DFlash;
  if (s == "dspark") return DrafterFamily::DSpark;
  if (s == "dflash2") return DrafterFamily::DFlash2;
  return std::nullopt;
}

const char* drafter_family_name(DrafterFamily f) {
  switch (f) {
    case DrafterFamily::DSpark: return "dspark";
    case DrafterFamily::DFlash2: return "dflash2";
    case DrafterFamily::DFlash: break;
  }
  return "dflash";
}

// The enum's names above are the bridge to the registry (family_registry.h): everything else about a family is
// asked of its plug-in in src/families.
const char* drafter_family_architecture(DrafterFamily f) { return family_of(f).architecture(); }

std::optional<DrafterFamily> drafter_family_of_architecture(const std::string& a) {
  const Family* f = find_family_of_architecture(a);
  return f ? drafter_family_from_text(f->name()) : std::nullopt;
}

DrafterFamily family_for_command(const std::string& command, const std::string& flag,
                                 std::optional<DrafterFamily> from_config, const std::string& config_where) {
  if (flag.empty()) return from_config.value_or(DrafterFamily::DFlash);
  const auto f = drafter_family_from_text(flag);
  if (!f)
    throw std::invalid_argument(command + ": --drafter-family must be " + registered_family_names() + ", got '" +
                                flag + "'");
  if (from_config && *from_config != *f)
    throw std::invalid_argument(command + ": --drafter-family " + flag + " disagrees with " + config_where + " (" +
                                drafter_family_name(*from_config) + ", by its architectures)");
  return *f;
}

const char* family_draft_vocab_refusal(DrafterFamily f) { return family_of(f).draft_vocab_refusal(); }

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
