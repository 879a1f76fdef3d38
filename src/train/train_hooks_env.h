// The test hooks of a whole training run read from the environment (DFLASH_TEST_FAIL_WORKER,
// DFLASH_TEST_KILL_IN_SAVE, DFLASH_TEST_DUMP_RANK_WEIGHTS), for the Python tests that drive `dflash train` or
// `dflash bench producer` (whose training runs take them too) as a process. Malformed values are refused.
#pragma once

namespace dflash::train {

struct TrainHooks;
TrainHooks hooks_from_environment();

}  // namespace dflash::train
