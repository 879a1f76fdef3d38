#include "trainer.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <sstream>

#include <nlohmann/json.hpp>

#include "attention_selfcheck.h"
#include "checkpoint.h"
#include "created_folder.h"
#include "draft_vocab.h"
#include "family.h"
#include "family_registry.h"
#include "family_train_settings.h"
#include "family_training.h"
#include "master_state.h"
#include "run_context.h"
#include "run_reporter.h"
#include "safetensors.h"
#include "selfcheck_json.h"
#include "step_producer.h"
#include "step_runner.h"
#include "target_setup.h"
#include "train_log.h"

namespace fs = std::filesystem;

namespace dflash::train {
namespace {

std::atomic<bool> g_stop{false};

extern "C" void on_sigint(int) {
  g_stop = true;
  std::signal(SIGINT, SIG_DFL);  // a second Ctrl-C ends the process at once
}

void describe_run(const RunContext& run, const TargetSide& side, int64_t total_steps, int64_t per_step) {
  std::string ids, devices;
  // Appended piecewise: GCC 12 warns (-Wrestrict, a false positive) on `"," + std::string` once inlined here.
  for (auto id : side.dcfg.target_layer_ids) (ids += ids.empty() ? "" : ",") += std::to_string(id);
  for (const auto& d : run.drafter_devices) (devices += devices.empty() ? "" : ",") += d.str();
  std::fprintf(stderr, "data: %s\ndrafter: %lld layers, hidden %lld, target layers [%s]; %zu workers (%s); %s; %lld "
               "steps x %lld sequences\n", side.samples->describe().c_str(), (long long)side.dcfg.num_hidden_layers,
               (long long)side.dcfg.hidden_size, ids.c_str(), run.drafter_devices.size(), devices.c_str(),
               run.coll->describe().c_str(), (long long)total_steps, (long long)per_step);
  if (!side.samples->has_features())
    std::fprintf(stderr, "target: %lld replica(s) x %lld pipeline stage(s) on %s\n",
                 (long long)run.target_layout.num_replicas(), (long long)run.target_layout.num_stages(),
                 run.target_layout.str().c_str());
}

// metrics.jsonl's record of one device's attention backend: what was asked, what runs, and the self-check's figures.
nlohmann::json attention_event(const ops::AttentionChoice& c, int64_t step) {
  nlohmann::json checks = nlohmann::json::array();
  for (const auto& r : c.checks) checks.push_back(attention_check_json(r));
  return {{"step", step},
          {"event", "attention_backend"},
          {"device", c.device},
          {"requested", ops::attention_backend_name(c.requested)},
          {"backend", ops::attention_backend_name(c.backend)},
          {"fell_back", c.fell_back()},
          {"line", c.line},
          {"checks", checks}};
}

// metrics.jsonl's record of the loss kernel's self-check.
nlohmann::json loss_kernel_event(const ops::LossCheckResult& r, int64_t step) {
  nlohmann::json j = loss_check_json(r);
  j.update({{"step", step}, {"event", "loss_kernel"}, {"device", "cpu"}, {"kernel", r.passed ? "fused" : "generic"}});
  return j;
}

// Before step 1: each drafter device's attention backend and the CPU loss kernel, checked and chosen by the runner
// (choose_kernels, which may refuse the start: so it runs before the run folder is written), then into the log
// (metrics.jsonl events); a process that is not the lead says a fallback itself.
struct KernelChoices {
  std::vector<ops::AttentionChoice> attention;
  std::optional<ops::LossCheckResult> loss;
};
KernelChoices choose_kernels(StepRunner& runner) { return {runner.choose_attention(), runner.check_loss_kernel()}; }

void log_kernels(const KernelChoices& kernels, const RunContext& run, TrainLog& log, int64_t start_step) {
  for (const auto& choice : kernels.attention) {
    if (run.lead) {
      log.message(choice.line);
      log.event(attention_event(choice, start_step));
    } else if (choice.fell_back()) {  // only the lead writes the log: other ranks say it themselves
      std::fprintf(stderr, "rank %lld: %s\n", (long long)run.coll->rank(), choice.line.c_str());
    }
  }
  if (const auto& loss_check = kernels.loss) {
    const std::string line = "loss: cpu: the fused cross-entropy kernel failed its self-check (" +
                             loss_check->spec.describe() + ": " + loss_check->summary() +
                             "); falling back to the generic cross-entropy";
    if (run.lead) {
      if (!loss_check->passed) log.message(line);
      log.event(loss_kernel_event(*loss_check, start_step));
    } else if (!loss_check->passed) {
      std::fprintf(stderr, "rank %lld: %s\n", (long long)run.coll->rank(), line.c_str());
    }
  }
}

// Writes the run's checkpoints (the lead only): the master weights, AdamW state, data position and draft vocabulary,
// atomically; remembers the last step saved for the divergence message.
class Checkpointer {
 public:
  // `settings`: to_json(cfg), made once for every checkpoint.
  Checkpointer(const TrainConfig& cfg, const nlohmann::json& settings, const RunContext& run, const TargetSide& side,
               const MasterState& master, TrainLog& log, const TrainHooks& hooks)
      : cfg_(cfg), settings_(settings), run_(run), side_(side), master_(master), log_(log), hooks_(hooks),
        saved_step_(run.resume ? run.resume->step : -1) {}

  bool saved_any() const { return saved_step_ >= 0; }
  void save(int64_t step, int64_t pos) {
    if (!run_.lead) return;
    if (!master_.finite())  // the step checks loss and gradient norm; this guards the file itself
      throw std::runtime_error("step " + std::to_string(step) + ": the master weights hold NaN/Inf; not saved");
    const nlohmann::json info = {{"settings", settings_}, {"seed", cfg_.seed}, {"world", run_.coll->world()},
                                 {"workers", run_.drafter_devices.size()}};
    auto kill_hook = [&] {
      if (hooks_.kill_in_save_step != step) return;
      std::fprintf(stderr, "test hook: killing the process between write and rename\n");
      std::fflush(stderr);
      std::raise(SIGKILL);
    };
    TrainState st = master_.checkpoint(step, pos, info);
    st.draft_ids = side_.draft_ids;  // the mapping travels with the weights it was trained with
    log_.message("checkpoint " + save_checkpoint(cfg_.out, st, cfg_.keep_checkpoints, kill_hook));
    saved_step_ = step;
  }
  // "the latest checkpoint stays the one of step N" or "no checkpoint was written"
  std::string kept() const {
    return saved_step_ >= 0 ? "the latest checkpoint stays the one of step " + std::to_string(saved_step_)
                            : "no checkpoint was written";
  }

 private:
  const TrainConfig& cfg_;
  const nlohmann::json& settings_;
  const RunContext& run_;
  const TargetSide& side_;
  const MasterState& master_;
  TrainLog& log_;
  const TrainHooks& hooks_;
  int64_t saved_step_;
};

// What this process's rows held, summed over the run, for the closing summary.
struct RowTotals {
  double real_tokens = 0, positions = 0, kept_blocks = 0, block_slots = 0;
  void add(const StepItem& item) {
    for (const auto& mb : item.micro)
      real_tokens += double(mb.tokens), positions += double(mb.positions), kept_blocks += double(mb.kept_blocks),
          block_slots += double(mb.block_slots);
  }
};

// After the last step: skipped samples, how full the rows were (what `pack` saves), the ranks' weights for the
// test hook, and the closing line.
void log_run_summary(const TrainConfig& cfg, const RunContext& run, const TargetSide& side, const MasterState& master,
                     const RowTotals& rows, const TrainHooks& hooks, TrainLog& log, bool stopped) {
  if (run.lead && side.samples->skipped() > 0)
    log.message("data: " + std::to_string(side.samples->skipped()) + " invalid samples skipped (named in the warnings above)");
  if (run.lead && rows.positions > 0) {
    char line[160];
    std::snprintf(line, sizeof line, "rows (pack %s): %.1f%% of positions are tokens, %.1f%% of blocks have an anchor",
                  cfg.pack ? "on" : "off", 100 * rows.real_tokens / rows.positions,
                  100 * rows.kept_blocks / std::max(1.0, rows.block_slots));
    log.message(line);
  }
  if (hooks.dump_rank_weights) {
    NamedTensors host;
    for (const auto& [n, tensor] : master.named) host.emplace_back(n, tensor.to(at::kCPU));
    io::save_safetensors((fs::path(cfg.out) / ("weights.rank" + std::to_string(run.coll->rank()) + ".safetensors")).string(),
                         host);
  }
  log.finish(stopped ? "interrupted: checkpoint written, exiting" : "done");
}

// The settings that scale the loss, the family's own included (each is bounded by TrainConfig::validate, but the
// bounds leave room to overflow bf16): "kl_weight (now 0), gamma (now 0), selector_loss_weight (now 1000)".
// `cfg` with the family's settings that follow the drafter's shape (a head rank not given follows the hidden size,
// head_rank_default.h; another family's stays at its default) as drafter `d` was built with them: what a resume
// rebuilds and what the settings file shows. Read from d's config.json, whose keys the family's settings share.
TrainConfig with_built_shape(TrainConfig cfg, const drafter::DrafterConfig& d) {
  const nlohmann::json built = drafter::drafter_config_to_json(d);
  for (const drafter::TrainSettingField& f : drafter::family_of(d.family).train_settings().fields()) {
    if (!f.follows_drafter_shape) continue;
    if (built.contains(f.key)) cfg.family_settings[f.key] = built.at(f.key);
    else if (built.contains("dflash_config") && built.at("dflash_config").contains(f.key))
      cfg.family_settings[f.key] = built.at("dflash_config").at(f.key);
  }
  return cfg;
}

std::string loss_settings(const TrainConfig& cfg, const nlohmann::json& settings) {
  std::ostringstream s;
  s << "kl_weight (now " << cfg.kl_weight << "), gamma (now " << cfg.gamma << ")";
  for (const std::string& key : drafter::family_training(cfg.family()).loss_setting_keys())
    s << ", " << key << " (now " << drafter::run_setting_number(settings, key) << ")";
  return s.str();
}

std::string diverged_advice(const TrainConfig& cfg, const nlohmann::json& settings, const DivergedError& e,
                            const std::string& kept, bool first_update) {
  const std::string loss = loss_settings(cfg, settings), dtype = util::dtype_name(cfg.dtype);
  std::ostringstream s;
  if (first_update) {  // no optimizer step has run: the learning rate cannot be the cause
    s << e.what() << " (the first step of the run, before any update: not the learning rate); the initial drafter, "
      << "its inputs or its loss give non-finite numbers: check the loss settings (" << loss
      << "), the target's features and its config (rope_theta, rope_scaling, rms_norm_eps), init_std (now "
      << cfg.init_std << "), init_final_norm (now " << cfg.init_final_norm << ") or bf16 -> fp32 (dtype, now "
      << dtype << ")";
    return s.str();
  }
  s << e.what() << "; the weights were not updated and " << kept
    << ". Try a lower lr (now " << cfg.lr << "), gradient clipping (clip, now " << cfg.clip
    << "), a longer warmup (warmup_ratio, now " << cfg.warmup_ratio << "), smaller loss settings (" << loss
    << ") or bf16 -> fp32 (dtype, now " << dtype << "), then --resume";
  return s.str();
}

}  // namespace

void install_sigint_handler() { std::signal(SIGINT, on_sigint); }

int run_training(const TrainConfig& cfg, const TrainHooks& hooks) {
  cfg.validate();
  RunContext run = open_run(cfg);
  TargetSide side = load_target_side(cfg, run);
  set_up_draft_vocab(cfg, run, side);

  const int64_t per_step = cfg.batch_size * cfg.grad_accum * int64_t(run.drafter_devices.size()) * run.coll->world();
  const int64_t total_steps = cfg.steps > 0 ? cfg.steps : (cfg.epochs * side.samples->size() + per_step - 1) / per_step;

  MasterState master = build_master_state(cfg, run, side);
  StepRunner runner(cfg, run, side, master, hooks);
  const int64_t start_step = run.resume ? run.resume->step : 0;
  const int64_t start_pos = run.resume ? run.resume->data_pos : 0;
  const int64_t workers = int64_t(run.drafter_devices.size());
  const bool online = !side.samples->has_features();
  const auto targets = online ? target_replicas(side) : std::vector<const models::TargetModel*>{};
  const int64_t replicas = std::max<int64_t>(1, int64_t(targets.size()));
  const int64_t stages = online ? run.target_layout.num_stages() : 1;
  const KernelChoices kernels = choose_kernels(runner);  // attention_backend fused refuses here
  StepProducer producer(
      producer_settings(cfg, side.dcfg, runner.loss_options().gamma, workers, run.coll->rank(), run.coll->world(),
                        replicas, stages),
      *side.samples, targets, start_step, total_steps, start_pos);

  // Every check has passed: only now does the run folder appear and get its files (issue 36: a refused start
  // leaves no folder behind; a resumed run's files are not rewritten by a start that is then refused).
  // Every rank, as before (the test hook dumps each rank's weights there). A run that fails before its first
  // checkpoint (a step that diverged, a worker error) takes the folder it made away again: nothing to resume.
  util::CreatedFolder made(cfg.out);
  if (!run.lead) made.keep();  // ranks may share the folder: only the lead, which writes its checkpoints, removes it
  if (run.lead) {
    // The head ranks the drafter was built with: what a resume rebuilds and what the settings file shows.
    const TrainConfig saved = with_built_shape(cfg, side.dcfg);
    write_file_atomic((fs::path(cfg.out) / "train_config.json").string(), to_json(saved).dump(2) + "\n");
    drafter::save_drafter_config((fs::path(cfg.out) / "drafter_config.json").string(), side.dcfg);
    if (side.draft_counts.defined())
      save_draft_vocab(cfg.out, {side.draft_ids, side.draft_counts, side.draft_lm_head});
    describe_run(run, side, total_steps, per_step);
  }
  TrainLog log(cfg.out, run.lead, start_step, total_steps, cfg.log_every);
  log_kernels(kernels, run, log, start_step);
  log.set_producer_name(online ? "target" : "data");
  RunReporter reporter(cfg, run.lead, log);  // report_to: follows metrics.jsonl from here, never waited on
  const nlohmann::json settings = to_json(cfg);  // what each checkpoint records, made once
  Checkpointer checkpoints(cfg, settings, run, side, master, log, hooks);
  int64_t step = start_step, pos = start_pos;
  bool stopped = false;
  RowTotals rows;  // this process's, for the summary
  auto t0 = std::chrono::steady_clock::now();  // wall time per step includes waiting for the producer
  double producer_busy = producer.busy_seconds(), drafter_busy = runner.busy_seconds();
  try {
    while (step < total_steps) {
      auto item = producer.next();
      if (!item) break;
      StepOutcome o = runner.step(*item, step, total_steps, g_stop.load());
      ++step;
      pos = item->pos_after;
      rows.add(*item);
      const auto t1 = std::chrono::steady_clock::now();
      o.metrics.step_seconds = std::chrono::duration<double>(t1 - t0).count();
      t0 = t1;
      o.metrics.samples = double(per_step);
      const double pb = producer.busy_seconds(), db = runner.busy_seconds();
      o.metrics.producer_busy_seconds = pb - producer_busy;
      o.metrics.drafter_busy_seconds = db - drafter_busy;
      producer_busy = pb, drafter_busy = db;
      log.step(o.metrics);
      stopped = o.stop;
      const bool pause = cfg.stop_after > 0 && step - start_step >= cfg.stop_after;
      if (stopped || pause || step == total_steps || step % cfg.checkpoint_every == 0) checkpoints.save(step, pos);
      if (stopped || pause) break;
    }
  } catch (const DivergedError& e) {
    producer.stop();
    if (checkpoints.saved_any()) made.keep();
    throw std::runtime_error(diverged_advice(cfg, settings, e, checkpoints.kept(), start_step == 0 && e.step == 1));
  } catch (...) {
    if (checkpoints.saved_any()) made.keep();
    throw;
  }
  made.keep();
  producer.stop();
  reporter.finish(stopped ? "interrupted" : "done");
  log_run_summary(cfg, run, side, master, rows, hooks, log, stopped);
  return stopped ? 130 : 0;
}

}  // namespace dflash::train
