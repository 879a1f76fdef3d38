// The Proposer of a loaded drafter, chosen by its family: the family's own proposer where it drafts differently from
// DFlash (the table in drafter_proposers.cpp, keyed by family name: the one place of eval that names a family), the
// DFlash proposer otherwise (a family that only changes training, e.g. the test-only toy family).
#pragma once
#include <cstdint>
#include <memory>

#include "attention_backend.h"
#include "dflash_proposer.h"
#include "proposer.h"

namespace dflash::eval {

struct DrafterProposerOptions {
  int64_t max_draft = 0;  // > 0: only the first max_draft drafts of a cycle
  ops::AttentionBackend attention = ops::AttentionBackend::Fused;
  double confidence_threshold = 0;  // > 0: the cumulative confidence cut of a family that has one
};

std::unique_ptr<Proposer> make_drafter_proposer(const LoadedDrafter& d, const models::TargetModel& target,
                                                const DrafterProposerOptions& o);

}  // namespace dflash::eval
