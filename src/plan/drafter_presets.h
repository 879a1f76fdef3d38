// The drafters `plan`, `plan --node` and `bench step` know by name, each with the step it runs at: one table.
//  - Every target preset (models/target_presets.h, configs/targets/): the drafter `dflash train` builds for that
//    target, from drafter::drafter_config_for_target with 5 layers and blocks of 16 (the released drafters').
//  - Shapes that are no real target's drafter, under names of their own:
//      seed-27b     the drafter of docs/DFLASH.md's seed run: the Qwen3.6-27B target's own attention layout (24 query
//                   heads x head_dim 256, 4 KV heads) on the drafter of that target; the released drafters use
//                   32 x 128 with 8 KV heads (the qwen3.6-27b preset). Kept to reproduce the seed's numbers.
//      cpu-small, cpu-sliding, cpu-vocab   CPU-sized drafters for `bench step` and the planner's tests.
#pragma once
#include <string>
#include <vector>

#include "drafter_config.h"
#include "memory_planner.h"
#include "run_shape.h"
#include "target_config.h"

namespace dflash::plan {

// docs/DFLASH.md's scale, the step a real target's drafter is planned at: seq 8000, 1024 anchors of 16, bf16, soft
// labels (kl_weight 0.15), loss chunks of 1024 rows.
drafter::RunShape target_scale_shape();
// The CPU shapes' step (bench step's default): seq 1024, 64 anchors, fp32, kl_weight 0.15, loss chunks of 256 rows.
drafter::RunShape cpu_step_shape();

struct DrafterPreset {
  std::string name;
  drafter::DrafterConfig drafter;
  std::string target;  // the target preset it drafts for ("" for the CPU shapes): what `plan --node` runs
  // The step it is planned and timed at unless a flag says otherwise: target_scale_shape() for a target's drafter
  // and seed-27b, cpu_step_shape() for the CPU shapes.
  drafter::RunShape shape = target_scale_shape();
};

std::vector<std::string> drafter_preset_names();  // target presets first, then the named shapes
// An unknown name is an std::invalid_argument "<where>: unknown preset 'x' (expected one of ...)".
DrafterPreset drafter_preset(const std::string& name, const std::string& where);

// `c` (a preset's or a target's drafter) as family `f` with that family's default settings, the head ranks train
// gives its hidden size (head_rank_default.h), validated; `where` names it in an error. `c` unchanged when it is
// of family `f` already (a drafter config keeps its own settings).
drafter::DrafterConfig drafter_as_family(drafter::DrafterConfig c, drafter::FamilyRef f, const std::string& where);

// A preset's drafter at its shape, with fp32 master weights and AdamW, on a GPU.
PlanSettings plan_preset(const std::string& name, const std::string& where = "plan");

}  // namespace dflash::plan
