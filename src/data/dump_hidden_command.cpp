// `dflash data dump-hidden`: offline training data. The target runs over the samples of a JSONL file written
// by `dflash data regenerate` (input_ids + loss_mask per line) and each sample's target-layer outputs are
// stored as bf16 [S, n*H] in dflash-hidden-v1 shards, part "dump" of the output folder (hidden_shard_writer.h),
// keyed by line number. Resumable: a rerun with the same settings computes only the samples no complete shard
// holds. Several replicas in --devices compute samples side by side (the k-th sample to do on replica k % R, a
// thread per pipeline stage), and the samples are stored in the same order as with one: the same shards.
#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>

#include "args.h"
#include "atomic_output.h"
#include "compute_settings.h"
#include "data_commands.h"
#include "held_out.h"
#include "hidden_features.h"
#include "hidden_shard_writer.h"
#include "hidden_shards.h"
#include "ordered_lanes.h"
#include "output_folder.h"
#include "progress.h"
#include "prompt_sources.h"
#include "settings_file.h"
#include "target_loader.h"
#include "target_options.h"
#include "token_records.h"

namespace fs = std::filesystem;

namespace dflash::data {

using util::Args;
int dump_hidden_main(const std::vector<std::string>& args) {
  Args a("data dump-hidden", "target hidden states of training samples as dflash-hidden-v1 shards (offline mode)");
  const models::TargetOptionSet target_set{.tokenizer = false, .eos = false, .replicas = true};
  models::add_target_options(a, target_set);
  a.alias("target-dtype", "dtype");
  a.option("data", "PATH", "", "samples JSONL from `dflash data regenerate` (input_ids + loss_mask per line)");
  a.option("out", "DIR", "", "output folder: shard-NNNNN.safetensors + index.json (rerun to resume)");
  a.option("target-layer-ids", "IDS", "",
           "comma list of target layers (empty: the default for --drafter-layers, docs/DFLASH.md)");
  a.option("drafter-layers", "N", "1", "drafter layers the default layer choice is made for");
  a.option("max-len", "N", "4096", "truncate samples to this many tokens (as the trainer's max_len)");
  a.option("samples-per-shard", "N", "1000", "samples per shard file");
  a.flag("last-hidden", "also store the final-normed last hidden state (needed for kl_weight > 0)");
  a.option("limit", "N", "-1", "dump the first N samples (-1: all); a rerun may raise it");
  a.range("drafter-layers", 1, 256).range("max-len", 2, 1048576).range("samples-per-shard", 1, 1000000000);
  a.range("limit", -1, 2147483647, " (-1: all)");
  if (!a.parse(args)) return 0;
  a.require("data");
  if (!a.given("out")) a.require("out");  // given empty: the output-folder check names it, as for any folder
  // Before any work; the folder itself appears with the first shard (a refused start leaves none).
  util::check_output_folder_use(a.str("out"), "data dump-hidden: --out", util::OutputFolderUse::Dataset);
  const models::TargetOptions topt = models::read_target_options(a, target_set);
  const int64_t max_len = a.i64("max-len"), per_shard = a.i64("samples-per-shard");
  if (max_len < 2) throw std::invalid_argument("--max-len must be >= 2");
  if (per_shard < 1) throw std::invalid_argument("--samples-per-shard must be >= 1");
  const std::string tdt = ops::dtype_name(topt.dtype);  // recorded: features depend on it
  const std::string data_path = a.str("data");
  data::check_split_allowed(data_path, "train");  // an evaluation set's file is refused by name or shape

  const std::string& target_path = topt.path;
  const models::TargetConfig tcfg = models::read_target_config(target_path);
  const std::vector<int64_t> layer_ids = data::feature_layer_ids(a.str("target-layer-ids"), a.i64("drafter-layers"), tcfg);
  const data::HiddenMeta meta = data::feature_meta(target_path, tcfg, layer_ids);
  // What a resumed run must share with the first one (the limit may grow).
  const nlohmann::json settings = {{"target", fs::absolute(target_path).lexically_normal().string()},
                                   {"target_identity", meta.target},
                                   {"target_num_layers", tcfg.num_hidden_layers},
                                   {"data", fs::absolute(data_path).lexically_normal().string()},
                                   {"target_layer_ids", layer_ids},
                                   {"hidden_size", tcfg.hidden_size},
                                   {"max_len", max_len},
                                   {"samples_per_shard", per_shard},
                                   {"target_dtype", tdt},
                                   {"last_hidden", a.on("last-hidden")},
                                   {"dtype", "bf16"}};

  const std::vector<TokenRecord> records = read_token_records(data_path, a.i64("limit"), /*skip_partial_last_line=*/true);
  HiddenShardWriter shards(a.str("out"), "dump", meta, settings, per_shard, "use another --out or the same settings",
                           /*adopt_legacy_index=*/true);
  if (!shards.covered().empty() && *shards.covered().rbegin() >= int64_t(records.size()))
    throw std::runtime_error(a.str("out") + ": already holds sample " + std::to_string(*shards.covered().rbegin()) +
                             " (line order), " + data_path + " (with --limit) has only " +
                             std::to_string(records.size()));
  std::vector<int64_t> todo;  // record numbers (line order) not in a complete shard yet
  for (int64_t r = 0; r < int64_t(records.size()); ++r)
    if (!shards.covered().count(r)) todo.push_back(r);
  const int64_t already = int64_t(records.size() - todo.size());
  if (already > 0)
    std::fprintf(stderr, "%s: resuming with %lld samples already in %lld complete shards\n", a.str("out").c_str(),
                 (long long)already, (long long)shards.shards());

  const std::vector<models::TargetModel> replicas = models::load_target_replicas(topt);
  const std::vector<int> capture(layer_ids.begin(), layer_ids.end());
  const bool want_last = a.on("last-hidden");
  struct Job {
    HiddenSample s;
    models::StagedForward fwd;
    bool finite = true;
  };
  const int lanes = int(replicas.size()), stages = int(topt.layout.num_stages());
  const int64_t threads = models::threads_per_thread(topt.threads, int64_t(lanes) * stages);
  util::OrderedLanes<Job> work(
      lanes, stages, int64_t(todo.size()), 2,
      [&](int lane, int stage, int64_t k, Job& job) {
        at::NoGradGuard no_grad;
        const models::TargetModel& model = replicas[size_t(lane)];
        if (stage == 0) {
          const TokenRecord& rec = records[size_t(todo[size_t(k)])];
          const int64_t S = std::min<int64_t>(max_len, int64_t(rec.ids.size()));
          const std::vector<int64_t> ids(rec.ids.begin(), rec.ids.begin() + S);
          job.s.input_ids = at::tensor(ids, at::kLong);
          job.s.loss_mask = at::tensor(std::vector<int64_t>(rec.mask.begin(), rec.mask.begin() + S), at::kLong).ne(0);
          job.fwd = model.begin_forward(job.s.input_ids.unsqueeze(0), nullptr, capture, false, want_last);
        }
        model.forward_stage(size_t(stage), job.fwd);
        if (stage + 1 < stages) return;
        at::Tensor last;
        job.s.hidden_states = features_of(job.fwd.out, capture, want_last ? &last : nullptr).to(at::kBFloat16);
        if (last.defined()) job.s.last_hidden = last.to(at::kBFloat16);
        job.fwd = {};
        job.finite = at::isfinite(job.s.hidden_states).all().item<bool>() &&
                     (!job.s.last_hidden.defined() || at::isfinite(job.s.last_hidden).all().item<bool>());
      },
      [&](int, int) { ops::set_thread_local_threads(threads); });

  Progress bar("dump-hidden", int64_t(records.size()), already, "samples");
  int64_t done = already, tokens = 0, nonfinite = 0;
  for (const int64_t r : todo) {
    std::optional<Job> job = work.next();
    if (!job) throw std::logic_error("dump-hidden: a sample went missing");
    bar.update(++done, tokens += job->s.input_ids.size(0));
    if (!job->finite) {
      ++nonfinite;  // the reader would skip it anyway; leaving it out keeps the shards clean
      std::fprintf(stderr, "\nwarning: %s: sample %lld: the target's hidden states hold NaN/Inf (in bf16); not stored\n",
                   data_path.c_str(), (long long)r);
      continue;
    }
    shards.add(r, std::move(job->s));
  }
  shards.flush();
  bar.finish();
  std::fprintf(stderr,
               "dumped %lld new samples (%lld tokens, %lld left out for NaN/Inf) in %.1f s; %s holds %lld samples of "
               "this dump in %lld shards\n",
               (long long)(todo.size() - nonfinite), (long long)tokens, (long long)nonfinite, bar.seconds(),
               a.str("out").c_str(), (long long)shards.samples(), (long long)shards.shards());
  return 0;
}

}  // namespace dflash::data
