#include "drafter_family_setting.h"

#include <stdexcept>

#include "dflash2_train_settings.h"
#include "drafter_config.h"

namespace dflash::train {

void resolve_drafter_family(TrainConfig& c, const std::string& command) {
  using drafter::DrafterFamily;
  if (c.drafter_config.empty()) {
    c.drafter_family = c.family();
    c.validate_family_settings();
    return;
  }
  const drafter::DrafterConfig d = drafter::load_drafter_config(c.drafter_config);
  if (c.drafter_family && *c.drafter_family != d.family)
    throw std::invalid_argument(command + ": drafter_family " + drafter::drafter_family_name(*c.drafter_family) +
                                " disagrees with " + c.drafter_config + " (architectures [\"" +
                                drafter::drafter_family_architecture(d.family) + "\"]: " +
                                drafter::drafter_family_name(d.family) + ")");
  c.drafter_family = d.family;
  if (d.family == DrafterFamily::DSpark) {
    // The file's heads are the model's; settings not given take them, given ones (even at their default) must agree.
    const drafter::DSparkHeads defaults, given = c.dspark_heads(), file = d.dspark;
    auto take = [&](const char* key, bool differs_given, bool differs_file, const std::string& shown_given,
                    const std::string& shown_file) {
      if (differs_given && differs_file)
        throw std::invalid_argument(command + ": '" + key + "' is " + shown_given + " but " + c.drafter_config +
                                    " says " + shown_file + " (leave it unset to take the drafter config's)");
    };
    take("markov_rank", c.was_given("markov_rank") || given.markov_rank != defaults.markov_rank, given.markov_rank != file.markov_rank,
         std::to_string(given.markov_rank), std::to_string(file.markov_rank));
    take("markov_head_type", c.was_given("markov_head_type") || given.markov_head_type != defaults.markov_head_type,
         given.markov_head_type != file.markov_head_type, drafter::markov_head_type_name(given.markov_head_type),
         drafter::markov_head_type_name(file.markov_head_type));
    take("enable_confidence_head", c.was_given("enable_confidence_head") || given.enable_confidence_head != defaults.enable_confidence_head,
         given.enable_confidence_head != file.enable_confidence_head, given.enable_confidence_head ? "true" : "false",
         file.enable_confidence_head ? "true" : "false");
    take("confidence_head_with_markov", c.was_given("confidence_head_with_markov") || given.confidence_head_with_markov != defaults.confidence_head_with_markov,
         given.confidence_head_with_markov != file.confidence_head_with_markov,
         given.confidence_head_with_markov ? "true" : "false", file.confidence_head_with_markov ? "true" : "false");
    c.markov_rank = file.markov_rank;
    c.markov_head_type = file.markov_head_type;
    c.enable_confidence_head = file.enable_confidence_head;
    c.confidence_head_with_markov = file.confidence_head_with_markov;
  }
  if (d.family == DrafterFamily::DFlash2) take_dflash2_settings_from(c, d, command);
  // A DFlash drafter config's draft vocabulary is the run's (the families' configs refuse one when read):
  // draft_vocab left at 0 takes it, another K is refused. It used to train the full vocabulary while the saved
  // drafter config kept draft_vocab_size, which export then refused as a draft-vocabulary run.
  if (d.draft_vocab_size > 0) {
    if (c.draft_vocab != 0 && c.draft_vocab != d.draft_vocab_size)
      throw std::invalid_argument(command + ": 'draft_vocab' is " + std::to_string(c.draft_vocab) + " but " +
                                  c.drafter_config + " says draft_vocab_size " + std::to_string(d.draft_vocab_size) +
                                  " (leave it unset to take the drafter config's)");
    c.draft_vocab = d.draft_vocab_size;
  }
  c.validate_family_settings();
}

}  // namespace dflash::train
