// `dflash data dump-hidden`: offline training data. The target runs over the samples of a JSONL file written
// by `dflash data regenerate` (input_ids + loss_mask per line) and each sample's target-layer outputs are
// stored as bf16 [S, n*H] in dflash-hidden-v1 shards (hidden_shards.h). Resumable: every shard is written
// atomically, then index.json (also atomic) lists it; a rerun continues after the last listed shard.
#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "args.h"
#include "compute_settings.h"
#include "atomic_file.h"
#include "data_commands.h"
#include "held_out.h"
#include "hidden_features.h"
#include "hidden_shards.h"
#include "progress.h"
#include "prompt_sources.h"
#include "settings_file.h"
#include "target_loader.h"
#include "target_options.h"
#include "token_records.h"

namespace fs = std::filesystem;

namespace dflash::data {

using util::Args;
namespace {

// The shards of an earlier run that are still intact (listed, present, of the recorded size); a damaged one
// and everything after it are dropped so they are written again.
nlohmann::json intact_shards(const fs::path& dir, const nlohmann::json& listed) {
  nlohmann::json keep = nlohmann::json::array();
  int64_t next = 0;
  for (const auto& s : listed) {
    const fs::path f = dir / s.at("file").get<std::string>();
    std::error_code ec;
    const auto size = fs::file_size(f, ec);
    if (ec || int64_t(size) != s.at("bytes").get<int64_t>() || s.at("first_record").get<int64_t>() != next) {
      std::fprintf(stderr, "%s: missing, truncated or out of order; it and later shards are written again\n",
                   f.string().c_str());
      break;
    }
    next += s.at("records").get<int64_t>();
    keep.push_back(s);
  }
  return keep;
}

}  // namespace

int dump_hidden_main(const std::vector<std::string>& args) {
  Args a("data dump-hidden", "target hidden states of training samples as dflash-hidden-v1 shards (offline mode)");
  models::add_target_options(a, {.tokenizer = false, .eos = false});
  a.alias("target-dtype", "dtype");
  a.option("data", "PATH", "", "samples JSONL from `dflash data regenerate` (input_ids + loss_mask per line)");
  a.option("out", "DIR", "", "output folder: shard-NNNNN.safetensors + index.json (rerun to resume)");
  a.option("target-layer-ids", "IDS", "", "comma list of target layers (empty: SPEC default for --drafter-layers)");
  a.option("drafter-layers", "N", "1", "drafter layers the SPEC default layer choice is made for");
  a.option("max-len", "N", "4096", "truncate samples to this many tokens (as the trainer's max_len)");
  a.option("samples-per-shard", "N", "1000", "samples per shard file");
  a.flag("last-hidden", "also store the final-normed last hidden state (needed for kl_weight > 0)");
  a.option("limit", "N", "-1", "dump the first N samples (-1: all); a rerun may raise it");
  if (!a.parse(args)) return 0;
  a.require("data");
  a.require("out");
  const models::TargetOptions topt = models::read_target_options(a);
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

  const fs::path out = a.str("out");
  fs::create_directories(out);
  const fs::path index_path = out / data::kHiddenIndexFile;
  nlohmann::json index = {{"format", data::kDflashHiddenFormat}, {"settings", settings}, {"shards", nlohmann::json::array()}};
  if (fs::exists(index_path)) {
    const nlohmann::json old = data::read_json_file(index_path.string());
    data::check_recorded_settings(old, settings, index_path.string(), "use another --out or the same settings");
    index["shards"] = intact_shards(out, old.value("shards", nlohmann::json::array()));
  }

  for (const auto& e : fs::directory_iterator(out))  // temporary files of an interrupted run
    if (e.path().filename().string().rfind("shard-", 0) == 0 && e.path().filename().string().find(".tmp") != std::string::npos)
      fs::remove(e.path());

  const std::vector<data::TokenRecord> records = data::read_token_records(data_path, a.i64("limit"), /*skip_partial_last_line=*/true);
  int64_t next = 0, stored = 0;  // records covered, samples written
  for (const auto& s : index["shards"]) next += s["records"].get<int64_t>(), stored += s["samples"].get<int64_t>();
  if (next > int64_t(records.size()))
    throw std::runtime_error(out.string() + ": already holds " + std::to_string(next) + " samples, " + data_path +
                             " (with --limit) has only " + std::to_string(records.size()));
  const int64_t already = next;
  if (already > 0)
    std::fprintf(stderr, "%s: resuming after %lld samples in %zu complete shards\n", out.string().c_str(),
                 (long long)already, index["shards"].size());

  const models::TargetModel model = models::load_target(topt);
  const std::vector<int> capture(layer_ids.begin(), layer_ids.end());
  at::NoGradGuard no_grad;

  data::Progress bar("dump-hidden", int64_t(records.size()), already, "samples");
  int64_t tokens = 0, nonfinite = 0;
  while (next < int64_t(records.size())) {
    const int64_t count = std::min<int64_t>(per_shard, int64_t(records.size()) - next);
    std::vector<data::HiddenSample> samples;
    int64_t shard_tokens = 0;
    for (int64_t r = next; r < next + count; ++r) {
      const data::TokenRecord& rec = records[size_t(r)];
      const int64_t S = std::min<int64_t>(max_len, int64_t(rec.ids.size()));
      data::HiddenSample s;
      s.input_ids = at::tensor(std::vector<int64_t>(rec.ids.begin(), rec.ids.begin() + S), at::kLong);
      s.loss_mask = at::tensor(std::vector<int64_t>(rec.mask.begin(), rec.mask.begin() + S), at::kLong).ne(0);
      at::Tensor last;
      s.hidden_states = data::sample_features(model, std::vector<int64_t>(rec.ids.begin(), rec.ids.begin() + S), capture,
                                              a.on("last-hidden") ? &last : nullptr)
                            .to(at::kBFloat16)
                            .contiguous();
      if (last.defined()) s.last_hidden = last.to(at::kBFloat16).contiguous();
      bar.update(r + 1, tokens += S);
      if (!at::isfinite(s.hidden_states).all().item<bool>() ||
          (s.last_hidden.defined() && !at::isfinite(s.last_hidden).all().item<bool>())) {
        ++nonfinite;  // the reader would skip it anyway; leaving it out keeps the shards clean
        std::fprintf(stderr, "\nwarning: %s: sample %lld: the target's hidden states hold NaN/Inf (in bf16); not stored\n",
                     data_path.c_str(), (long long)r);
        continue;
      }
      samples.push_back(std::move(s));
      shard_tokens += S;
    }
    char name[64];
    std::snprintf(name, sizeof name, "shard-%05zu.safetensors", index["shards"].size());
    const fs::path shard = out / name;
    data::write_hidden_shard(shard.string(), samples, meta, {{"split", "train"}});
    index["shards"].push_back({{"file", name},
                               {"samples", int64_t(samples.size())},
                               {"records", count},
                               {"first_record", next},
                               {"tokens", shard_tokens},
                               {"bytes", int64_t(fs::file_size(shard))}});
    next += count;
    stored += int64_t(samples.size());
    index["samples"] = stored;
    data::write_file_atomic(index_path.string(), index.dump(1) + "\n");  // the shard counts only once the index lists it
  }
  if (!fs::exists(index_path)) {
    index["samples"] = stored;
    data::write_file_atomic(index_path.string(), index.dump(1) + "\n");
  }
  bar.finish();
  std::fprintf(stderr,
               "dumped %lld new samples (%lld tokens, %lld left out for NaN/Inf) in %.1f s; %s holds %lld samples in "
               "%zu shards\n",
               (long long)(next - already - nonfinite), (long long)tokens, (long long)nonfinite, bar.seconds(),
               out.string().c_str(), (long long)stored, index["shards"].size());
  return 0;
}

}  // namespace dflash::data
