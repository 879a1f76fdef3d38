// `dflash train`: the training loop. One producer thread prepares steps (data, online target, anchors),
// W drafter worker threads (one device and one weight replica each) compute loss and gradients of their
// micro-batches, the main thread sums the workers' gradients in worker order, all-reduces them across
// processes (c10d), normalises by the step's total loss weight, clips, applies AdamW to the fp32 master
// weights and refreshes the replicas. Checkpoints, metrics and SIGINT handling live here too.
#pragma once
#include <string>

#include "drafter_config.h"
#include "train_config.h"

namespace dflash::models {
struct TargetConfig;
}

namespace dflash::train {

// Runs a full training; returns the exit code (0 done, 130 stopped by SIGINT after a checkpoint).
int run_training(const TrainConfig& cfg);

// The drafter config: cfg.drafter_config's file, else derived from the target's architecture
// (hidden/heads/MLP of the target, cfg.drafter_layers layers, SPEC default target_layer_ids).
drafter::DrafterConfig resolve_drafter_config(const TrainConfig& cfg, const models::TargetConfig& target);

// Installs the SIGINT handler (first Ctrl-C: finish the step, checkpoint, exit 130; second: default action).
void install_sigint_handler();

// `dflash export`: the run's latest checkpoint as an HF drafter folder (hf_export.h: config.json, dflash.py,
// model.safetensors).
void export_run(const std::string& run_dir, const std::string& out_dir, const std::string& dtype);

}  // namespace dflash::train
