// `dflash data regenerate`: the target writes its own replies to prompts; each sample is the chat-formatted
// prompt plus the reply as input_ids, with loss_mask = 1 on the reply only. Output is resumable JSONL
// (sample_store.h) with a sidecar <output>.meta.json that pins the settings a resume must share. With
// --hidden-out the target's layer outputs of each sample are kept from the same pass (hidden_shard_writer.h).
// Several replicas in --devices decode side by side, each its own continuous batch over the prompts k, k + R, ...
// of the ones to do (k its index); replies are still written in prompt order (OrderedSampleWriter).
#include <ATen/ATen.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <thread>

#include "args.h"
#include "atomic_file.h"
#include "batched_generator.h"
#include "compute_settings.h"
#include "data_commands.h"
#include "hidden_shard_writer.h"
#include "held_out.h"
#include "hidden_features.h"
#include "progress.h"
#include "prompt_sources.h"
#include "regenerate_output.h"
#include "response_generator.h"
#include "sample_store.h"
#include "settings_file.h"
#include "target_io.h"
#include "target_options.h"

namespace dflash::data {

using util::Args;

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
  a.option("target-layer-ids", "IDS", "", "with --hidden-out: target layers (empty: SPEC default for --drafter-layers)");
  a.option("drafter-layers", "N", "1", "with --hidden-out: drafter layers the SPEC default layer choice is made for");
  a.option("hidden-samples-per-shard", "N", "100", "with --hidden-out: samples per shard file");
  if (!a.parse(args)) return 0;
  a.require("input");
  a.require("output");
  const models::TargetOptions topt = models::read_target_options(a, target_set);
  const std::string input = a.str("input"), output = a.str("output"), split = a.str("split");
  check_split_allowed(input, split);
  if (a.f64("temperature") < 0) throw std::invalid_argument("--temperature must be >= 0");
  if (a.i64("max-new") < 1) throw std::invalid_argument("--max-new must be >= 1");
  if (a.i64("batch") < 1) throw std::invalid_argument("--batch must be >= 1");
  if (!a.str("hidden-out").empty() && split != "train")
    throw std::invalid_argument("--hidden-out: features are training data; --split is '" + split + "'");

  // Settings a resumed run must share with the first one (the limit may grow). The dtype changes the answers;
  // it is recorded only when not fp32, so outputs written before it was an option still resume.
  nlohmann::json meta = {{"model", std::filesystem::absolute(topt.path).string()},
                         {"input", std::filesystem::absolute(input).string()},
                         {"split", split},
                         {"max_new", a.i64("max-new")},
                         {"temperature", a.f64("temperature")},
                         {"seed", a.i64("seed")},
                         {"eos", topt.eos},
                         {"shards", a.i64("shards")},
                         {"shard", a.i64("shard")}};
  if (topt.dtype != at::kFloat) meta["dtype"] = ops::dtype_name(topt.dtype);
  const std::string meta_path = output + ".meta.json";
  if (std::filesystem::exists(meta_path))
    check_recorded_settings(read_json_file(meta_path), meta, meta_path, "use another --output or the same settings");
  else
    write_file_atomic(meta_path, meta.dump(2) + "\n");

  const int64_t shards = a.i64("shards"), shard = a.i64("shard");
  if (shards < 1 || shard < 0 || shard >= shards)
    throw std::invalid_argument("--shard must be in [0, --shards) and --shards >= 1");
  std::vector<Prompt> prompts;
  for (auto& p : read_prompts(input, a.i64("limit")))
    if (p.index % shards == shard) prompts.push_back(std::move(p));
  std::set<std::string> held;
  if (split == "train") {
    const std::string dir = a.given("held-out-dir") ? a.str("held-out-dir")
                                                     : std::filesystem::absolute(input).parent_path().string();
    held = held_out_texts(dir);
  }
  SampleStore store(output);
  if (store.dropped_torn_line()) std::fprintf(stderr, "%s: dropped a torn last line (interrupted write)\n", output.c_str());

  models::TargetModel model = models::load_target(topt);
  std::unique_ptr<HiddenShardWriter> features;
  std::vector<int> capture;
  if (!a.str("hidden-out").empty()) {
    // Features are pinned to the settings that produced their answers, not to one JSONL path, so a folder copied
    // beside a copied JSONL (demo.sh --long taking over the demo's work) resumes. Each shard stores its samples'
    // tokens with their features, so training never pairs features with another file's answers.
    nlohmann::json answers = meta;
    answers.erase("shard");  // the part name carries it
    const models::TargetConfig& tcfg = model.config();
    const std::vector<int64_t> ids = feature_layer_ids(a.str("target-layer-ids"), a.i64("drafter-layers"), tcfg);
    const HiddenMeta hmeta = feature_meta(topt.path, tcfg, ids);
    const nlohmann::json settings = {{"target", std::filesystem::absolute(topt.path).lexically_normal().string()},
                                     {"target_identity", hmeta.target},
                                     {"target_layer_ids", ids},
                                     {"hidden_size", tcfg.hidden_size},
                                     {"answers", answers},
                                     {"target_dtype", ops::dtype_name(topt.dtype)},
                                     {"dtype", "bf16"}};
    const std::string part = "part" + std::to_string(shard) + "of" + std::to_string(shards);
    features = std::make_unique<HiddenShardWriter>(a.str("hidden-out"), part, hmeta, settings,
                                                   a.i64("hidden-samples-per-shard"),
                                                   "use another --hidden-out or the same settings");
    capture.assign(ids.begin(), ids.end());
    repair_missing_features(model, output, capture, *features);
  }
  if (a.i64("batch") > 1 && a.i64("onednn") != 0) model.enable_onednn_decode();
  std::vector<models::TargetModel> more;  // replicas 1..: copies of the loaded one (oneDNN copies shared on the CPU)
  for (size_t r = 1; r < topt.layout.replicas.size(); ++r) more.push_back(model.replicate(topt.layout.replicas[r]));
  auto replica = [&](size_t r) -> const models::TargetModel& { return r == 0 ? model : more[r - 1]; };
  auto tokenizer = models::load_target_tokenizer(topt);
  std::unique_ptr<tok::ChatFormat> chat;
  if (tokenizer) chat = std::make_unique<tok::ChatFormat>(tok::ChatFormat::from_tokenizer(*tokenizer));
  GenerationOptions gen;
  gen.max_new = a.i64("max-new");
  gen.temperature = a.f64("temperature");
  gen.seed = static_cast<uint64_t>(a.i64("seed"));
  gen.eos_ids = parse_stop_ids(topt.eos, model, tokenizer.get());
  gen.capture_layers = capture;

  PromptQueue queue(std::move(prompts), store, std::move(held));
  OrderedSampleWriter writer(store, features.get(), std::filesystem::path(input).filename().string(), split);
  // The prompts to do, in order, tokenized up front (the writer learns them in prompt order).
  std::vector<BatchPrompt> todo;
  for (const Prompt* p = queue.next(); p; p = queue.next()) {
    BatchPrompt b;
    b.id = p->index;
    b.stream = static_cast<uint64_t>(p->index);
    b.tokens = prompt_token_ids(*p, tokenizer.get(), chat.get(), input + ": prompt " + std::to_string(p->index),
                                model.config());
    writer.started(p->index, b.tokens);
    todo.push_back(std::move(b));
  }
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
  const size_t R = topt.layout.replicas.size();
  const int64_t threads = models::threads_per_thread(topt.threads, int64_t(R));
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
        per_replica[r] = generate_batched(replica(r), gen, a.i64("batch"), next, reply_done);
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
  if (writer.unwritten() != 0) throw std::logic_error("data regenerate: replies left unwritten");
  if (features) features->flush();
  bar.update(queue.already_done() + queue.dropped() + finished, new_tokens, /*force=*/true);
  bar.finish();
  const double el = bar.seconds();
  std::fprintf(stderr,
               "regenerated %lld new samples (%lld already present, %lld dropped as held-out overlaps): "
               "%lld tokens in %.1f s = %.1f tokens/s overall, decode %.1f tokens/s%s (batch %lld, %.2f rows/step)\n",
               static_cast<long long>(finished), static_cast<long long>(queue.already_done()),
               static_cast<long long>(queue.dropped()), static_cast<long long>(new_tokens), el,
               el > 0 ? new_tokens / el : 0.0, stats.decode_seconds > 0 ? stats.decode_tokens / stats.decode_seconds : 0.0,
               R > 1 ? " per replica" : "",
               static_cast<long long>(a.i64("batch")),
               stats.decode_steps > 0 ? static_cast<double>(stats.decode_tokens) / stats.decode_steps : 0.0);
  // Where the rest of the wall time went: prompts are prefilled one at a time while the batch waits.
  if (R == 1)
    std::fprintf(stderr, "time: prefill %.1f s (%lld prompt tokens, %.0f tokens/s), batched decode %.1f s, other %.1f s\n",
                 stats.prefill_seconds, static_cast<long long>(stats.prefill_tokens),
                 stats.prefill_seconds > 0 ? stats.prefill_tokens / stats.prefill_seconds : 0.0, stats.decode_seconds,
                 std::max(0.0, el - stats.prefill_seconds - stats.decode_seconds));
  else
    std::fprintf(stderr, "time, summed over %zu replicas: prefill %.1f s (%lld prompt tokens), batched decode %.1f s\n", R,
                 stats.prefill_seconds, static_cast<long long>(stats.prefill_tokens), stats.decode_seconds);
  if (features)
    std::fprintf(stderr, "features: %lld samples of this part in %s (target layers %s)\n",
                 static_cast<long long>(features->samples()), a.str("hidden-out").c_str(),
                 join_ids(std::vector<int64_t>(capture.begin(), capture.end())).c_str());
  return 0;
}

}  // namespace dflash::data
