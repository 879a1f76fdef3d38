#include "train_hooks_env.h"

#include <cstdint>
#include <limits>

#include "number_range.h"
#include "step_runner.h"

namespace dflash::train {

TrainHooks hooks_from_environment() {
  TrainHooks h;
  // Malformed values are refused (atoi read "junk" as worker 0).
  if (const auto f = util::env_integer("DFLASH_TEST_FAIL_WORKER", 0, 1024, " (a test-only switch: a worker index)"))
    h.fail_worker = int(*f);
  if (const auto k = util::env_integer("DFLASH_TEST_KILL_IN_SAVE", 0, std::numeric_limits<int64_t>::max(),
                                       " (a test-only switch: a step)"))
    h.kill_in_save_step = *k;
  if (const auto d = util::env_integer("DFLASH_TEST_DUMP_RANK_WEIGHTS", 0, 1, " (a test-only switch)"))
    h.dump_rank_weights = *d == 1;
  return h;
}

}  // namespace dflash::train
