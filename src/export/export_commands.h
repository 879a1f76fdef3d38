// The `dflash` commands of the export layer: a training run's checkpoint as a Hugging Face drafter folder.
#pragma once
#include <string>
#include <vector>

#include "subcommand.h"

namespace dflash::exporting {

int export_main(const std::vector<std::string>& args);

inline std::vector<util::Subcommand> commands() {
  return {
      {{"export"}, "write a training run's latest checkpoint as an HF drafter folder", &export_main},
  };
}

}  // namespace dflash::exporting
