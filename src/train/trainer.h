// `dflash train`: a training run in named phases (trainer.cpp reads top to bottom like the run itself):
//   open the run (run_context.h) -> load the target and the data (target_setup.h) -> master weights and
//   AdamW (master_state.h) -> replicas and worker threads (step_runner.h) -> the step producer thread
//   (step_producer.h) -> steps, logs and checkpoints -> finish.
#pragma once
#include <string>

#include "step_runner.h"
#include "train_config.h"

namespace dflash::train {

// Runs a full training; returns the exit code (0 done, 130 stopped by SIGINT after a checkpoint). A diverging
// run (NaN/Inf loss or gradient norm) throws an error naming the step, with the last finite checkpoint kept.
int run_training(const TrainConfig& cfg, const TrainHooks& hooks = {});

// Installs the SIGINT handler (first Ctrl-C: finish the step, checkpoint, exit 130; second: default action).
void install_sigint_handler();

}  // namespace dflash::train
