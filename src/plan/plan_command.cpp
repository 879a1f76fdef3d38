// `dflash plan`: predicted peak training memory of the drafter, with a breakdown, before any step runs.
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "args.h"
#include "drafter_config.h"
#include "family_registry.h"
#include "drafter_from_target.h"
#include "drafter_model.h"
#include "drafter_presets.h"
#include "family_cost.h"
#include "family_registry.h"
#include "dtype_names.h"
#include "input_file.h"
#include "memory_fit.h"
#include "memory_planner.h"
#include "number_range.h"
#include "node_planner.h"
#include "plan_commands.h"
#include "run_shape.h"
#include "serving_engines.h"
#include "sourced_spec.h"
#include "target_loader.h"
#include "target_presets.h"

namespace dflash::plan {

using namespace dflash::drafter;  // the drafter this layer plans and measures

using util::Args;

namespace {

// The step's shape: train's settings, names, defaults and ranges (drafter/run_shape.h).
const std::vector<std::string> kPlanShape = {"max_len",         "num_anchors", "block_size", "dtype",
                                             "activation_checkpoint", "loss_chunk_rows", "kl_weight"};

PlanOptimizer optimizer_of(const std::string& s) {
  if (const auto o = plan_optimizer_from_text(s)) return *o;
  throw std::invalid_argument("plan: --optimizer: expected adamw, sgd or none, got '" + s + "'");
}

PlanDevice device_of(const std::string& s) {
  if (const auto d = plan_device_from_text(s)) return *d;
  throw std::invalid_argument("plan: --device: expected cuda or cpu, got '" + s + "'");
}

// A target's config.json (or a folder holding one, or a .gguf file).
models::TargetConfig read_target(const std::string& path) {
  if (std::filesystem::is_directory(path) || (path.size() >= 5 && path.compare(path.size() - 5, 5, ".gguf") == 0))
    return models::read_target_config(path);
  std::string text;
  try {
    text = io::read_regular_file(path, 64 << 20);
  } catch (const std::runtime_error& e) {
    throw std::runtime_error(std::string("--target-config ") + e.what());
  }
  return models::parse_target_config(text, "'" + path + "'");
}

// A GPU's memory: 1 GB to 100 TB (1e-300 or 1e308 bytes is no GPU).
double gpu_memory_flag(const Args& a) {
  const double b = util::parse_byte_size(a.str("gpu-memory"), "plan: --gpu-memory").bytes;
  if (!(b >= 1e9 && b <= 1e14))
    throw std::invalid_argument("plan: --gpu-memory must be a size in [1GB, 100TB], got '" + a.str("gpu-memory") + "'");
  return b;
}

// "qwen3-8b|qwen3.6-27b": the target presets, as the flag's help and errors name them.
std::string target_preset_list() {
  std::string names;
  for (const auto& n : models::target_preset_names()) names += (names.empty() ? "" : "|") + n;
  return names;
}

// The family a plan runs (--drafter-family over --config's architectures). A preset or a target's drafter takes
// the family's default settings (a config keeps its own). A family whose own teacher replaces soft labels (DSpark's
// L1, FamilyCost::replaces_soft_labels) plans kl_weight 0, as train requires (its teacher's logits and the last hidden
// state are counted for the family itself).
void apply_family(PlanSettings& s, drafter::FamilyRef family, const Args& a, const std::string& command) {
  using namespace dflash::drafter;
  s.cfg = drafter_as_family(s.cfg, family, command + ": the drafter as drafter_family " + family.name());
  if (const std::string teacher = family_cost(s.cfg).replaces_soft_labels(); !teacher.empty()) {
    if (a.given("kl-weight") && a.f64("kl-weight") != 0)
      throw std::invalid_argument(command + ": --kl-weight must be 0 with drafter_family " +
                                  family.name() + " (" + teacher + " replaces soft labels)");
    s.kl_weight = 0;
  }
}

// Where the drafter comes from, as the command line says, read once: a preset, a drafter config file or a target's
// config.json ("" for those not given).
struct PlanSource {
  std::string preset, config, target_config;
};

PlanSource source_of(const Args& a) { return {a.str("preset"), a.str("config"), a.str("target-config")}; }

// The drafter's source as the spec names it: "preset qwen3-8b", "drafter config d.json" or "the drafter for target
// t.json"; a drafter config file is the one source the flags cannot override.
std::string spec_source(const PlanSource& src) {
  if (!src.preset.empty()) return "preset " + src.preset;
  if (!src.config.empty()) return "drafter config " + src.config;
  return "the drafter for target " + src.target_config;
}

// `d` with the drafter fields `flags` gives (drafter/sourced_spec.h): a drafter config file meets them under the
// rule (a field given by both with another value is an error naming both, as `dflash train` refuses it); a preset's
// or a target's drafter takes them over its own, as its defaults.
void take_flags(drafter::DrafterConfig& d, const drafter::DrafterSpec& flags, const PlanSource& src,
                const std::string& command) {
  const drafter::DrafterSpec own = drafter::spec_of_drafter(d, spec_source(src));
  drafter::apply_spec(src.config.empty() ? drafter::spec_over(own, flags) : drafter::merge_specs(flags, own, command), d);
}

// --block-size as a spec field ("flag --block-size").
drafter::DrafterSpec block_size_flag(const Args& a) {
  drafter::DrafterSpec s;
  if (a.given("block-size")) s.block_size = drafter::Sourced<int64_t>{a.i64("block-size"), "flag --block-size"};
  return s;
}

}  // namespace

// --node: the split of a node's GPUs between target replicas x stages and drafter workers (node_planner.h).
int plan_node_main(const Args& a, drafter::FamilyRef family, const PlanSource& src) {
  NodeSettings ns;
  // What --node does not read: it picks the checkpointing and loss chunk that fit each GPU itself, and plans
  // training on CUDA with AdamW and fp32 master weights.
  a.refuse_given({"budget", "activation-checkpoint", "loss-chunk-rows"},
                 "with --node (it picks the activation checkpointing and loss chunk that fit a GPU; the GPU's memory "
                 "is --gpu or --gpu-memory)");
  a.refuse_given({"optimizer", "no-master", "device", "deterministic", "attention-backend", "draft-vocab"},
                 "with --node (it plans CUDA workers with AdamW, fp32 master weights, the fused attention and the full "
                 "vocabulary); plan without --node reads it");
  if (!src.preset.empty()) a.refuse_given({"drafter-layers", "mask-token-id"}, "with --preset (only with --target-config)");
  if (!src.config.empty()) a.refuse_given({"drafter-layers", "mask-token-id"}, "with --config (only with --target-config)");
  if (!src.preset.empty() == !src.target_config.empty())
    throw std::invalid_argument("plan --node: give the target as --preset " + target_preset_list() +
                                " or --target-config FILE");
  drafter::RunShape shape = target_scale_shape();  // the presets' scale (drafter_presets.h)
  if (!src.preset.empty()) {
    const DrafterPreset preset = drafter_preset(src.preset, "plan --node");
    if (preset.target.empty())
      throw std::invalid_argument("plan --node: preset '" + preset.name + "' drafts for no real target; give the "
                                  "target as --preset " + target_preset_list() + " or --target-config FILE");
    ns.target = models::target_preset(preset.target);
    ns.drafter = plan_preset(preset.name, "plan --node");
    shape = preset.shape;
  } else {
    ns.target = read_target(src.target_config);
    ns.drafter.cfg = src.config.empty()
                         ? drafter_config_for_target(ns.target, a.i64("drafter-layers"), drafter::RunShape{}.block_size,
                                                     a.i64("mask-token-id"), {})
                         : load_drafter_config(src.config);
    if (ns.drafter.cfg.mask_token_id < 0) ns.drafter.cfg.mask_token_id = ns.target.vocab_size - 1;  // plans the same
    ns.drafter.cfg.validate(src.config.empty() ? "drafter config for target " + src.target_config : src.config);
    check_capturable_layer_ids(ns.drafter.cfg.target_layer_ids, ns.target.num_hidden_layers,
                               src.config.empty() ? "plan --node: target_layer_ids"
                                                  : src.config + ": dflash_config.target_layer_ids");
    if (ns.drafter.cfg.hidden_size != ns.target.hidden_size || ns.drafter.cfg.vocab_size != ns.target.vocab_size)
      throw std::invalid_argument("plan --node: the drafter config's hidden_size/vocab_size (" +
                                  std::to_string(ns.drafter.cfg.hidden_size) + "/" +
                                  std::to_string(ns.drafter.cfg.vocab_size) + ") must equal the target's (" +
                                  std::to_string(ns.target.hidden_size) + "/" + std::to_string(ns.target.vocab_size) + ")");
  }
  // The shape given over the preset's (checkpointing and loss chunk are refused above: --node picks them).
  set_run_shape(ns.drafter, drafter::given_run_shape(a, {"max_len", "num_anchors", "kl_weight", "dtype"}, shape));
  check_step_shape(ns.drafter.seq_len, ns.drafter.num_anchors, "plan --node: --num-anchors", "--max-len");
  if (a.given("batch")) ns.drafter.batch = a.i64("batch");
  take_flags(ns.drafter.cfg, block_size_flag(a), src, "plan --node");
  apply_family(ns.drafter, family, a, "plan --node");
  ns.drafter.device = PlanDevice::Cuda;
  ns.gpu = gpu_spec(a.str("gpu"));
  if (a.given("gpu-memory")) ns.gpu.memory_bytes = gpu_memory_flag(a);
  if (a.given("gpu-tflops")) ns.gpu.bf16_flops = a.f64("gpu-tflops") * 1e12;
  if (a.given("gpu-memory") || a.given("gpu-tflops")) ns.gpu.name += " (given)";
  ns.gpus = a.i64("gpus");
  ns.target_efficiency = a.f64("target-efficiency");
  ns.drafter_efficiency = a.f64("drafter-efficiency");
  ns.usable_memory = a.f64("usable-memory");
  const NodePlan p = plan_node(ns);
  if (a.on("json")) std::cout << node_plan_to_json(p).dump(2) << "\n";
  else std::cout << format_node_plan(p);
  return p.splits.empty() ? 3 : 0;
}

int plan_main(const std::vector<std::string>& argv) {
  Args a("plan", "predict the peak memory of one drafter training step (and pick settings for a budget); with --node, "
                 "split a node's GPUs between the target and the drafter workers");
  a.option("config", "FILE", "", "drafter config.json (or use --preset)");
  a.option("drafter-family", "NAME", "", "dflash | dspark | dflash2 (default: --config's architectures, else dflash)");
  std::string presets;
  for (const auto& n : drafter_preset_names()) presets += (presets.empty() ? "" : " | ") + n;
  a.option("preset", "NAME", "", presets + " (drafter_presets.h: a target's drafter as `dflash train` builds it, or a "
                                 "named shape; seq 8000, 1024 anchors, bf16, AdamW)");
  a.option("target-config", "FILE", "", "a target's config.json: plan the drafter `dflash train` would build for it");
  a.option("drafter-layers", "N", "5", "drafter layers (with --target-config)");
  a.option("mask-token-id", "ID", "-1", "mask token (with --target-config; only checked, memory does not depend on it)");
  // The step's shape, as train spells it (a preset's own shape unless given).
  drafter::declare_run_shape(a, kPlanShape);
  a.option("batch", "B", "1", "sequences per step");
  a.option("optimizer", "NAME", "adamw", "adamw | sgd | none");
  a.flag("no-master", "no fp32 master weights");
  a.option("device", "NAME", "cuda", "cuda | cpu (attention backward workspace differs)");
  a.flag("deterministic", "CUDA: deterministic algorithms (train's `deterministic`): dQ without the fp32 accumulator");
  a.option("attention-backend", "NAME", "auto",
           "fused | reference (its tiles and dK/dV accumulators) | auto (the larger of the two: a run may fall back)");
  a.option("draft-vocab", "K", "0", "LM head restricted to a draft vocabulary of K tokens (0: the full vocabulary)");
  a.option("budget", "SIZE", "", "pick the cheapest checkpoint policy and loss chunk that fit, e.g. 90GB");
  a.flag("json", "print JSON instead of text");
  a.flag("node", "throughput of a node: the split of --gpus GPUs into target replicas x pipeline stages and drafter "
                 "workers with the most samples/s that fits (target from --preset or --target-config)");
  a.option("gpus", "N", "8", "with --node: GPUs of the node");
  std::string gpus;
  for (const auto& g : gpu_specs()) gpus += (gpus.empty() ? "" : " | ") + g.name;
  a.option("gpu", "KIND", "rtx-pro-6000", "with --node: " + gpus + " (memory, dense bf16 rate)");
  a.option("gpu-memory", "SIZE", "", "with --node: memory of a GPU instead of --gpu's, e.g. 96GB");
  a.option("gpu-tflops", "X", "", "with --node: dense bf16 TFLOP/s of a GPU instead of --gpu's");
  a.option("target-efficiency", "X", "0.5", "with --node: achieved share of peak FLOP/s of the target forward");
  a.option("drafter-efficiency", "X", "0.4", "with --node: achieved share of peak FLOP/s of a drafter step");
  a.option("usable-memory", "X", "0.9", "with --node: share of a GPU's memory a plan may fill");
  // Every number flag has a range (docs/ERRORS.md "Limits"), checked when it is read; the train settings' limits
  // where the setting is the same. GPU rates of 1 TFLOP/s to 1 EFLOP/s: inf, 1e308 or 1e-300 made every time 0 or
  // infinite.
  a.range("drafter-layers", 1, 256).range("mask-token-id", -1, 2147483647, " (-1: the last token id)");
  a.range("batch", 1, 65536);
  a.range("gpus", 2, 256, " (the target and a drafter worker need a GPU each)");
  a.range("gpu-tflops", util::closed(1, 1e6)).range("target-efficiency", util::closed(0.01, 1));
  a.range("drafter-efficiency", util::closed(0.01, 1)).range("usable-memory", util::closed(0.05, 1));
  if (!a.parse(argv)) return 0;
  const PlanSource src = source_of(a);
  // The family first: the planner counts its extra memory and FLOPs (its FamilyCost: DSpark's heads and objective,
  // DFlash2's convs and selector), with --node too.
  drafter::FamilyRef family;
  {
    const std::string config = src.config;
    const std::optional<drafter::FamilyRef> from_config =
        config.empty() ? std::nullopt : std::optional(drafter::load_drafter_config(config).family);
    family = drafter::family_for_command("plan", a.str("drafter-family"), from_config, config);
  }
  if (a.on("node")) return plan_node_main(a, family, src);

  using namespace dflash::drafter;
  a.refuse_given({"gpus", "gpu", "gpu-memory", "gpu-tflops", "target-efficiency", "drafter-efficiency", "usable-memory"},
                 "without --node (the memory of one drafter worker; --budget SIZE checks it against a memory size)");
  if (src.target_config.empty())
    a.refuse_given({"drafter-layers", "mask-token-id"}, "without --target-config (--config and --preset name the drafter)");
  PlanSettings s;
  if (int(!src.preset.empty()) + int(!src.config.empty()) + int(!src.target_config.empty()) > 1)
    throw std::invalid_argument("plan: give only one of --config, --preset and --target-config");
  if (!src.preset.empty()) {
    s = plan_preset(src.preset, "plan");
  } else if (!src.config.empty()) {
    s.cfg = load_drafter_config(src.config);
    check_capturable_layer_ids(s.cfg.target_layer_ids, s.cfg.num_target_layers,
                               src.config + ": dflash_config.target_layer_ids");
  } else if (!src.target_config.empty()) {
    const models::TargetConfig t = read_target(src.target_config);
    s.cfg = drafter_config_for_target(t, a.i64("drafter-layers"), drafter::RunShape{}.block_size,
                                      a.i64("mask-token-id"), {});
    if (s.cfg.mask_token_id < 0) s.cfg.mask_token_id = t.vocab_size - 1;  // no default mask: any id plans the same
    s.cfg.validate("drafter config for target " + src.target_config);
  } else {
    throw std::invalid_argument("plan: give --config FILE, --target-config FILE or --preset " + target_preset_list());
  }
  const bool preset = !src.preset.empty();
  auto pick = [&](const char* name) { return !preset || a.given(name); };
  // A preset's shape, else train's defaults; the flags given over it.
  set_run_shape(s, drafter::given_run_shape(
                       a, kPlanShape, preset ? drafter_preset(src.preset, "plan").shape : drafter::RunShape{}));
  check_step_shape(s.seq_len, s.num_anchors, "plan: --num-anchors", "--max-len");
  if (pick("batch")) s.batch = a.i64("batch");
  take_flags(s.cfg, block_size_flag(a), src, "plan");
  if (pick("optimizer")) s.optimizer = optimizer_of(a.str("optimizer"));
  if (a.on("no-master")) s.master_fp32 = false;
  if (pick("device")) s.device = device_of(a.str("device"));
  if (a.on("deterministic")) s.deterministic = true;
  s.attention_backend = ops::parse_attention_backend(a.str("attention-backend"), "plan: --attention-backend");
  apply_family(s, family, a, "plan");
  if (*drafter::family_of(family).draft_vocab_refusal() && a.given("draft-vocab") && a.i64("draft-vocab") != 0)
    throw std::invalid_argument(std::string("plan: --draft-vocab must be 0 with drafter_family ") +
                                family.name() + " (" + family_of(family).draft_vocab_refusal() + ")");
  if (a.given("draft-vocab")) {
    const int64_t k = a.i64("draft-vocab");
    if (k < 0 || k > s.cfg.vocab_size)
      throw std::invalid_argument("plan: --draft-vocab must be in [0, " + std::to_string(s.cfg.vocab_size) +
                                  "] (0: the full vocabulary; at most the target's vocabulary size), got " +
                                  std::to_string(k));
    // Given is given, 0 too (as train counts a key it is given, whatever its value): a drafter config's K meets it
    // under the rule (an error naming both), a preset's or a target's drafter takes it. The full vocabulary is 0,
    // as a drafter config's draft_vocab_size equal to vocab_size reads.
    drafter::DrafterSpec flag;
    flag.draft_vocab = k == s.cfg.vocab_size && k != 0
                           ? drafter::Sourced<int64_t>{0, "flag --draft-vocab " + std::to_string(k) + ": the full vocabulary"}
                           : drafter::Sourced<int64_t>{k, "flag --draft-vocab"};
    take_flags(s.cfg, flag, src, "plan");
  }

  if (!a.str("budget").empty()) {
    const double budget = util::parse_byte_size(a.str("budget"), "plan: --budget").bytes;
    const BudgetChoice c = plan_for_budget(s, budget);
    if (a.on("json")) {
      nlohmann::json j = plan_to_json(c.plan);
      j["budget_bytes"] = budget;
      j["fits"] = c.fits;
      if (!c.fits) j["why"] = c.why;
      std::cout << j.dump(2) << "\n";
    } else {
      if (c.fits)
        std::cout << "fits in " << human_bytes(budget) << " with checkpoint "
                  << c.plan.settings.checkpoint.name() << ", loss chunk "
                  << c.plan.settings.loss_chunk_rows << " rows\n\n";
      else
        std::cout << c.why << "\n\n";
      std::cout << format_plan(c.plan);
    }
    return c.fits ? 0 : 3;
  }
  const MemoryPlan p = plan_memory(s);
  if (a.on("json")) std::cout << plan_to_json(p).dump(2) << "\n";
  else std::cout << format_plan(p);
  return 0;
}

}  // namespace dflash::plan
