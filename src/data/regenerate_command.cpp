// `dflash data regenerate` (regenerate.h): the flags into RegenerateOptions, and run_regenerate in named phases.
#include <ATen/ATen.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <thread>

#include "args.h"
#include "atomic_file.h"
#include "atomic_output.h"
#include "batched_generator.h"
#include "compute_settings.h"
#include "data_commands.h"
#include "held_out.h"
#include "hidden_features.h"
#include "hidden_shard_writer.h"
#include "output_folder.h"
#include "progress.h"
#include "prompt_sources.h"
#include "regenerate.h"
#include "regenerate_output.h"
#include "response_generator.h"
#include "sample_store.h"
#include "settings_file.h"
#include "target_io.h"
#include "target_options.h"

namespace dflash::data {

using util::Args;

namespace {

// Settings a resumed run must share with the first one (the limit may grow), recorded in <output>.meta.json on the
// first run (once every check has passed) and checked on every later one before anything loads. The dtype changes
// the answers; it is recorded only when not fp32, so outputs written before it was an option still resume.
nlohmann::json settings_record(const RegenerateOptions& o) {
  nlohmann::json meta = {{"model", std::filesystem::absolute(o.target.path).string()},
                         {"input", std::filesystem::absolute(o.input).string()},
                         {"split", o.split},
                         {"max_new", o.max_new},
                         {"temperature", o.temperature},
                         {"seed", int64_t(o.seed)},
                         {"eos", o.target.eos},
                         {"shards", o.shards},
                         {"shard", o.shard}};
  if (o.target.dtype != at::kFloat) meta["dtype"] = ops::dtype_name(o.target.dtype);
  const std::string meta_path = o.output + ".meta.json";
  if (std::filesystem::exists(meta_path))
    check_recorded_settings(read_json_file(meta_path), meta, meta_path, "use another --output or the same settings");
  return meta;
}

// The record of a first run, written once every check has passed.
void write_settings_record(const RegenerateOptions& o, const nlohmann::json& meta) {
  const std::string meta_path = o.output + ".meta.json";
  if (!std::filesystem::exists(meta_path)) write_file_atomic(meta_path, meta.dump(2) + "\n");
}

// This process's prompts (index % shards == shard) and the evaluation texts a training split must not contain.
std::vector<Prompt> prompts_of_this_shard(const RegenerateOptions& o, std::set<std::string>& held) {
  std::vector<Prompt> prompts;
  for (auto& p : read_prompts(o.input, o.limit))
    if (p.index % o.shards == o.shard) prompts.push_back(std::move(p));
  if (o.split == "train")
    held = held_out_texts(o.held_out_dir ? *o.held_out_dir : std::filesystem::absolute(o.input).parent_path().string());
  return prompts;
}

// --hidden-out: the feature writer of this process's part, and the target layers to capture. Features are pinned to
// the settings that produced their answers, not to one JSONL path, so a folder copied beside a copied JSONL (demo.sh
// --long taking over the demo's work) resumes. Each shard stores its samples' tokens with their features, so
// training never pairs features with another file's answers.
std::unique_ptr<HiddenShardWriter> open_features(const RegenerateOptions& o, const models::TargetModel& model,
                                                 const nlohmann::json& meta, std::vector<int>& capture) {
  nlohmann::json answers = meta;
  answers.erase("shard");  // the part name carries it
  const models::TargetConfig& tcfg = model.config();
  const std::vector<int64_t> ids = feature_layer_ids(o.target_layer_ids, o.drafter_layers, tcfg);
  const HiddenMeta hmeta = feature_meta(o.target.path, tcfg, ids);
  nlohmann::json settings = {{"target", std::filesystem::absolute(o.target.path).lexically_normal().string()},
                                   {"target_identity", hmeta.target},
                                   {"target_layer_ids", ids},
                                   {"hidden_size", tcfg.hidden_size},
                                   {"answers", answers},
                                   {"target_dtype", ops::dtype_name(o.target.dtype)},
                                   {"dtype", "bf16"}};
  // Only when asked: folders written before the flag existed keep resuming under the same settings.
  if (o.last_hidden) settings["last_hidden"] = true;
  const std::string part = "part" + std::to_string(o.shard) + "of" + std::to_string(o.shards);
  auto features = std::make_unique<HiddenShardWriter>(o.hidden_out, part, hmeta, settings, o.hidden_samples_per_shard,
                                                      "use another --hidden-out or the same settings");
  capture.assign(ids.begin(), ids.end());
  return features;  // writes nothing yet: repair_missing_features runs once every check has passed
}

// Replica r decodes the prompts r, r + R, ... of `todo` as one continuous batch; each reply goes to `reply_done` as
// it finishes (from any replica's thread). Returns the statistics summed over the replicas.
BatchStats decode_on_replicas(const std::vector<const models::TargetModel*>& replicas, const GenerationOptions& gen,
                              int64_t batch, int64_t threads_total, std::vector<BatchPrompt>& todo,
                              const std::function<void(int64_t, GenerationResult&&)>& reply_done) {
  const size_t R = replicas.size();
  const int64_t threads = models::threads_per_thread(threads_total, int64_t(R));
  std::vector<BatchStats> per_replica(R);
  std::vector<std::exception_ptr> errors(R);
  std::atomic<bool> failed{false};
  std::vector<std::thread> threads_of;
  for (size_t r = 0; r < R; ++r)
    threads_of.emplace_back([&, r] {
      try {
        ops::set_thread_local_threads(threads);
        size_t next_k = r;
        auto next = [&](BatchPrompt& out) {
          if (failed || next_k >= todo.size()) return false;
          out = std::move(todo[next_k]);
          next_k += R;
          return true;
        };
        per_replica[r] = generate_batched(*replicas[r], gen, batch, next, reply_done);
      } catch (...) {
        errors[r] = std::current_exception();
        failed = true;
      }
    });
  for (auto& t : threads_of) t.join();
  for (const auto& e : errors)
    if (e) std::rethrow_exception(e);
  BatchStats stats;
  for (const BatchStats& s : per_replica) {
    stats.prefill_tokens += s.prefill_tokens;
    stats.decode_steps += s.decode_steps;
    stats.decode_tokens += s.decode_tokens;
    stats.prefill_seconds += s.prefill_seconds;  // thread-seconds: summed over the replicas
    stats.decode_seconds += s.decode_seconds;
  }
  return stats;
}

// The closing lines: samples, rates, where the time went, and the features kept.
void report(const RegenerateOptions& o, const PromptQueue& queue, int64_t finished, int64_t new_tokens, double seconds,
            const BatchStats& stats, size_t R, const HiddenShardWriter* features, const std::vector<int>& capture) {
  std::fprintf(stderr,
               "regenerated %lld new samples (%lld already present, %lld dropped as held-out overlaps): "
               "%lld tokens in %.1f s = %.1f tokens/s overall, decode %.1f tokens/s%s (batch %lld, %.2f rows/step)\n",
               static_cast<long long>(finished), static_cast<long long>(queue.already_done()),
               static_cast<long long>(queue.dropped()), static_cast<long long>(new_tokens), seconds,
               seconds > 0 ? new_tokens / seconds : 0.0,
               stats.decode_seconds > 0 ? stats.decode_tokens / stats.decode_seconds : 0.0, R > 1 ? " per replica" : "",
               static_cast<long long>(o.batch),
               stats.decode_steps > 0 ? static_cast<double>(stats.decode_tokens) / stats.decode_steps : 0.0);
  // Where the rest of the wall time went: prompts are prefilled one at a time while the batch waits.
  if (R == 1)
    std::fprintf(stderr, "time: prefill %.1f s (%lld prompt tokens, %.0f tokens/s), batched decode %.1f s, other %.1f s\n",
                 stats.prefill_seconds, static_cast<long long>(stats.prefill_tokens),
                 stats.prefill_seconds > 0 ? stats.prefill_tokens / stats.prefill_seconds : 0.0, stats.decode_seconds,
                 std::max(0.0, seconds - stats.prefill_seconds - stats.decode_seconds));
  else
    std::fprintf(stderr, "time, summed over %zu replicas: prefill %.1f s (%lld prompt tokens), batched decode %.1f s\n", R,
                 stats.prefill_seconds, static_cast<long long>(stats.prefill_tokens), stats.decode_seconds);
  if (features)
    std::fprintf(stderr, "features: %lld samples of this part in %s (target layers %s)\n",
                 static_cast<long long>(features->samples()), o.hidden_out.c_str(),
                 join_ids(std::vector<int64_t>(capture.begin(), capture.end())).c_str());
}

}  // namespace

void run_regenerate(const RegenerateOptions& o) {
  // Every check comes before the first byte is written (issue 36): a refused start leaves no output file, no
  // settings record and no feature folder behind.
  io::check_resumable_output_path(o.output, "data regenerate: --output");
  io::check_output_path(o.output + ".meta.json", "data regenerate: --output's settings record");
  if (!o.hidden_out.empty())
    util::check_output_folder_use(o.hidden_out, "data regenerate: --hidden-out", util::OutputFolderUse::Dataset);
  check_split_allowed(o.input, o.split);
  if (o.temperature < 0) throw std::invalid_argument("--temperature must be >= 0");
  if (o.max_new < 1) throw std::invalid_argument("--max-new must be >= 1");
  if (o.batch < 1) throw std::invalid_argument("--batch must be >= 1");
  if (o.last_hidden && o.hidden_out.empty())
    throw std::invalid_argument("--last-hidden: stores the last hidden state beside the features: give --hidden-out");
  if (!o.hidden_out.empty() && o.split != "train")
    throw std::invalid_argument("--hidden-out: features are training data; --split is '" + o.split + "'");
  if (o.shards < 1 || o.shard < 0 || o.shard >= o.shards)
    throw std::invalid_argument("--shard must be in [0, --shards) and --shards >= 1");
  const nlohmann::json meta = settings_record(o);
  std::set<std::string> held;
  std::vector<Prompt> prompts = prompts_of_this_shard(o, held);
  SampleStore store(o.output);  // reads what an earlier run wrote; creates nothing yet

  models::TargetModel model = models::load_target(o.target);
  std::unique_ptr<HiddenShardWriter> features;
  std::vector<int> capture;
  if (!o.hidden_out.empty()) features = open_features(o, model, meta, capture);
  if (o.batch > 1 && o.onednn) model.enable_onednn_decode();
  std::vector<models::TargetModel> more;  // replicas 1..: copies of the loaded one (oneDNN copies shared on the CPU)
  for (size_t r = 1; r < o.target.layout.replicas.size(); ++r) more.push_back(model.replicate(o.target.layout.replicas[r]));
  std::vector<const models::TargetModel*> replicas = {&model};
  for (const auto& m : more) replicas.push_back(&m);
  auto tokenizer = models::load_target_tokenizer(o.target);
  std::unique_ptr<tok::ChatFormat> chat;
  if (tokenizer) chat = std::make_unique<tok::ChatFormat>(tok::ChatFormat::from_tokenizer(*tokenizer));
  GenerationOptions gen;
  gen.max_new = o.max_new;
  gen.temperature = o.temperature;
  gen.seed = o.seed;
  gen.eos_ids = parse_stop_ids(o.target.eos, model, tokenizer.get());
  gen.capture_layers = capture;

  PromptQueue queue(std::move(prompts), store, std::move(held));
  // The prompts to do, in order, tokenized up front (a prompt too long for the target fails here, before any write).
  std::vector<BatchPrompt> todo;
  for (const Prompt* p = queue.next(); p; p = queue.next()) {
    BatchPrompt b;
    b.id = p->index;
    b.stream = static_cast<uint64_t>(p->index);
    b.tokens = prompt_token_ids(*p, tokenizer.get(), chat.get(), o.input + ": prompt " + std::to_string(p->index),
                                model.config());
    todo.push_back(std::move(b));
  }

  // Everything checked: now the outputs.
  write_settings_record(o, meta);
  if (store.dropped_torn_line()) std::fprintf(stderr, "%s: dropped a torn last line (interrupted write)\n", o.output.c_str());
  store.open_for_append();
  if (features) repair_missing_features(model, o.output, capture, *features, o.last_hidden);
  OrderedSampleWriter writer(store, features.get(), std::filesystem::path(o.input).filename().string(), o.split);
  if (o.last_hidden)
    writer.set_last_hidden([&model, &capture](const std::vector<int64_t>& ids) {
      at::Tensor last;
      sample_features(model, ids, capture, &last);
      return last;
    });
  for (const BatchPrompt& b : todo) writer.started(b.id, b.tokens);  // the writer learns them in prompt order
  Progress bar("regenerate", queue.size(), queue.already_done());
  int64_t finished = 0, new_tokens = 0;
  std::mutex done_mutex;  // the writer, the store and the progress bar: one replica at a time
  // Progress counts replies as they finish, not as they are written: with --batch 64 the reply of the first
  // prompt may finish last, and an in-order count would show an ETA of hours for the first minute.
  auto reply_done = [&](int64_t index, GenerationResult&& r) {
    std::lock_guard<std::mutex> l(done_mutex);
    new_tokens += static_cast<int64_t>(r.tokens.size());
    bar.update(queue.already_done() + queue.dropped() + ++finished, new_tokens);
    writer.finished(index, std::move(r));
  };
  const BatchStats stats = decode_on_replicas(replicas, gen, o.batch, o.target.threads, todo, reply_done);
  if (writer.unwritten() != 0) throw std::logic_error("data regenerate: replies left unwritten");
  if (features) features->flush();
  bar.update(queue.already_done() + queue.dropped() + finished, new_tokens, /*force=*/true);
  bar.finish();
  report(o, queue, finished, new_tokens, bar.seconds(), stats, replicas.size(), features.get(), capture);
}

int regenerate_main(const std::vector<std::string>& args) {
  Args a("data regenerate", "the target's own replies to prompts, as training samples (resumable JSONL)");
  const models::TargetOptionSet target_set{.replicas = true};
  models::add_target_options(a, target_set);
  a.option("input", "PATH", "", "prompts JSONL(.gz): messages / prompt_ids / turns / question / prompt per line");
  a.option("output", "PATH", "", "samples JSONL (appended to; rerun to resume)");
  a.option("split", "NAME", "train", "train (refuses evaluation sets) or eval");
  a.option("held-out-dir", "DIR", "input's folder", "evaluation sets here are never used for training: prompts "
           "with the same text are dropped ('' to skip)");
  a.option("limit", "N", "-1", "use the first N prompts (-1: all)");
  a.option("shards", "N", "1", "split the prompts into N shards by index (one process per shard, own --output)");
  a.option("shard", "K", "0", "the shard this process writes: prompts with index % N == K");
  a.option("max-new", "N", "256", "maximum reply tokens");
  a.option("temperature", "T", "0", "0: greedy; > 0: sample from softmax(logits / T)");
  a.option("seed", "S", "0", "sampling seed (each prompt draws from its own stream)");
  a.option("batch", "N", "16", "replies decoded together (continuous batching); samples are still written in "
           "prompt order");
  a.option("onednn", "0|1", "1", "with --batch > 1: batched matmuls through oneDNN on a second copy of the weights "
           "(faster at several rows on CPU; twice the weight memory)");
  a.option("hidden-out", "DIR", "", "also store the drafter's offline features (as dump-hidden would) from the same "
           "target pass: dflash-hidden-v1 shards of this process's part in DIR, which all --shards may share");
  a.option("target-layer-ids", "IDS", "", "with --hidden-out: target layers (empty: the default for --drafter-layers, "
           "docs/DFLASH.md)");
  a.option("drafter-layers", "N", "1", "with --hidden-out: drafter layers the default layer choice is made for");
  a.option("hidden-samples-per-shard", "N", "100", "with --hidden-out: samples per shard file");
  a.flag("last-hidden", "with --hidden-out: also store the final-normed last hidden state (kl_weight > 0 and "
         "drafter_family dspark need it; one more target forward per sample)");
  a.range("limit", -1, 2147483647, " (-1: all)").range("shards", 1, 65536).range("shard", 0, 65535);
  a.range("max-new", 1, 1048576).range("temperature", util::closed(0, 100), " (0: greedy)");
  a.range("seed", 0, std::numeric_limits<int64_t>::max()).range("batch", 1, 4096).range("onednn", 0, 1);
  a.range("drafter-layers", 1, 256).range("hidden-samples-per-shard", 1, 1000000000);
  if (!a.parse(args)) return 0;
  a.require("input");
  if (!a.given("output")) a.require("output");  // given empty: the output-path check names it, as for any path
  RegenerateOptions o;
  o.target = models::read_target_options(a, target_set);
  o.input = a.str("input");
  o.output = a.str("output");
  o.split = a.str("split");
  if (a.given("held-out-dir")) o.held_out_dir = a.str("held-out-dir");
  o.limit = a.i64("limit");
  o.shards = a.i64("shards");
  o.shard = a.i64("shard");
  o.max_new = a.i64("max-new");
  o.temperature = a.f64("temperature");
  o.seed = static_cast<uint64_t>(a.i64("seed"));
  o.batch = a.i64("batch");
  o.onednn = a.i64("onednn") != 0;
  o.hidden_out = a.str("hidden-out");
  o.target_layer_ids = a.str("target-layer-ids");
  o.drafter_layers = a.i64("drafter-layers");
  o.hidden_samples_per_shard = a.i64("hidden-samples-per-shard");
  o.last_hidden = a.on("last-hidden");
  run_regenerate(o);
  return 0;
}

}  // namespace dflash::data
