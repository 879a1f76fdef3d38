// `dflash data regenerate`: the target writes its own replies to prompts; each sample is the chat-formatted
// prompt plus the reply as input_ids, with loss_mask = 1 on the reply only. Output is resumable JSONL
// (sample_store.h) with a sidecar <output>.meta.json that pins the settings a resume must share. With
// --hidden-out the target's layer outputs of each sample are kept from the same pass (feature_shard_writer.h).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "args.h"
#include "atomic_file.h"
#include "batched_generator.h"
#include "feature_shard_writer.h"
#include "held_out.h"
#include "hidden_features.h"
#include "progress.h"
#include "prompt_sources.h"
#include "response_generator.h"
#include "sample_store.h"
#include "settings_file.h"
#include "target_io.h"
#include "target_loader.h"
#include "token_records.h"

namespace dflash::cli {

int data_regenerate_main(const std::vector<std::string>& args) {
  Args a("data regenerate", "the target's own replies to prompts, as training samples (resumable JSONL)");
  a.option("model", "PATH", "", "target: a .gguf file or a Hugging Face folder");
  a.option("tokenizer", "PATH", "", "tokenizer (.gguf or tokenizer.json); default: from --model");
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
  a.option("eos", "IDS", "config", "stop ids: config (model + tokenizer), none, or comma-separated ids");
  a.option("batch", "N", "16", "replies decoded together (continuous batching); samples are still written in "
           "prompt order");
  a.option("onednn", "0|1", "1", "with --batch > 1: batched matmuls through oneDNN on a second copy of the weights "
           "(faster at several rows on CPU; twice the weight memory)");
  a.option("hidden-out", "DIR", "", "also store the drafter's offline features (as dump-hidden would) from the same "
           "target pass: dflash-hidden-v1 shards of this process's part in DIR, which all --shards may share");
  a.option("target-layer-ids", "IDS", "", "with --hidden-out: target layers (empty: SPEC default for --drafter-layers)");
  a.option("drafter-layers", "N", "1", "with --hidden-out: drafter layers the SPEC default layer choice is made for");
  a.option("hidden-samples-per-shard", "N", "100", "with --hidden-out: samples per shard file");
  a.option("threads", "N", "0", "intra-op threads (0: LibTorch default)");
  if (!a.parse(args)) return 0;
  for (const char* req : {"model", "input", "output"})
    if (a.str(req).empty()) throw std::invalid_argument(std::string("data regenerate: --") + req + " is required");
  if (a.i64("threads") > 0) at::set_num_threads(static_cast<int>(a.i64("threads")));
  const std::string input = a.str("input"), output = a.str("output"), split = a.str("split");
  data::check_split_allowed(input, split);
  if (a.f64("temperature") < 0) throw std::invalid_argument("--temperature must be >= 0");
  if (a.i64("max-new") < 1) throw std::invalid_argument("--max-new must be >= 1");
  if (a.i64("batch") < 1) throw std::invalid_argument("--batch must be >= 1");
  if (!a.str("hidden-out").empty() && split != "train")
    throw std::invalid_argument("--hidden-out: features are training data; --split is '" + split + "'");

  // Settings a resumed run must share with the first one (the limit may grow).
  nlohmann::json meta = {{"model", std::filesystem::absolute(a.str("model")).string()},
                         {"input", std::filesystem::absolute(input).string()},
                         {"split", split},
                         {"max_new", a.i64("max-new")},
                         {"temperature", a.f64("temperature")},
                         {"seed", a.i64("seed")},
                         {"eos", a.str("eos")},
                         {"shards", a.i64("shards")},
                         {"shard", a.i64("shard")}};
  const std::string meta_path = output + ".meta.json";
  if (std::filesystem::exists(meta_path))
    data::check_recorded_settings(data::read_json_file(meta_path), meta, meta_path,
                                  "use another --output or the same settings");
  else
    data::write_file_atomic(meta_path, meta.dump(2) + "\n");

  const int64_t shards = a.i64("shards"), shard = a.i64("shard");
  if (shards < 1 || shard < 0 || shard >= shards)
    throw std::invalid_argument("--shard must be in [0, --shards) and --shards >= 1");
  std::vector<data::Prompt> prompts;
  for (auto& p : data::read_prompts(input, a.i64("limit")))
    if (p.index % shards == shard) prompts.push_back(std::move(p));
  std::set<std::string> held;
  if (split == "train") {
    const std::string dir = a.given("held-out-dir") ? a.str("held-out-dir")
                                                     : std::filesystem::absolute(input).parent_path().string();
    held = data::held_out_texts(dir);
  }
  data::SampleStore store(output);
  if (store.dropped_torn_line()) std::fprintf(stderr, "%s: dropped a torn last line (interrupted write)\n", output.c_str());

  models::TargetModel model = models::load_target(a.str("model"));
  std::unique_ptr<data::FeatureShardWriter> features;
  std::vector<int> capture;
  if (!a.str("hidden-out").empty()) {
    // Features are pinned to the settings that produced their answers, not to one JSONL path, so a folder copied
    // beside a copied JSONL (demo.sh --long taking over the demo's work) resumes. Each shard stores its samples'
    // tokens with their features, so training never pairs features with another file's answers.
    nlohmann::json answers = meta;
    answers.erase("shard");  // the part name carries it
    const models::TargetConfig& tcfg = model.config();
    const std::vector<int64_t> ids = data::feature_layer_ids(a.str("target-layer-ids"), a.i64("drafter-layers"), tcfg);
    const data::HiddenMeta hmeta = data::feature_meta(a.str("model"), tcfg, ids);
    const nlohmann::json settings = {{"target", std::filesystem::absolute(a.str("model")).lexically_normal().string()},
                                     {"target_identity", hmeta.target},
                                     {"target_layer_ids", ids},
                                     {"hidden_size", tcfg.hidden_size},
                                     {"answers", answers},
                                     {"target_dtype", "fp32"},
                                     {"dtype", "bf16"}};
    const std::string part = "part" + std::to_string(shard) + "of" + std::to_string(shards);
    features = std::make_unique<data::FeatureShardWriter>(a.str("hidden-out"), part, hmeta, settings,
                                                          a.i64("hidden-samples-per-shard"));
    capture.assign(ids.begin(), ids.end());
    // Samples already in the JSONL whose features were lost (a crash before their shard was written, or a
    // JSONL regenerated without --hidden-out): one forward each, as dump-hidden computes them.
    std::vector<data::TokenRecord> missing;
    for (auto& r : data::read_token_records(output, -1, /*skip_partial_last_line=*/true))
      if (r.index >= 0 && !features->covered().count(r.index)) missing.push_back(std::move(r));
    if (!missing.empty()) {
      data::Progress fill("features of samples already written", int64_t(missing.size()), 0, "samples");
      int64_t n = 0, toks = 0;
      for (const auto& r : missing) {
        data::HiddenSample h;
        h.input_ids = at::tensor(r.ids, at::kLong);
        h.loss_mask = at::tensor(r.mask, at::kLong).ne(0);
        h.hidden_states = data::sample_features(model, r.ids, capture);
        features->add(r.index, std::move(h));
        fill.update(++n, toks += int64_t(r.ids.size()));
      }
      features->flush();
      fill.finish();
    }
  }
  if (a.i64("batch") > 1 && a.i64("onednn") != 0) model.enable_onednn_decode();
  auto tokenizer = data::load_tokenizer_for(a.str("model"), a.str("tokenizer"));
  std::unique_ptr<tok::ChatFormat> chat;
  if (tokenizer) chat = std::make_unique<tok::ChatFormat>(tok::ChatFormat::from_tokenizer(*tokenizer));
  data::GenerationOptions gen;
  gen.max_new = a.i64("max-new");
  gen.temperature = a.f64("temperature");
  gen.seed = static_cast<uint64_t>(a.i64("seed"));
  gen.eos_ids = data::parse_stop_ids(a.str("eos"), model, tokenizer.get());
  gen.capture_layers = capture;

  int64_t dropped = 0, already = 0;
  for (const auto& p : prompts) already += store.has(p.index) ? 1 : 0;
  const std::string source = std::filesystem::path(input).filename().string();
  data::Progress bar("regenerate", static_cast<int64_t>(prompts.size()), already);
  int64_t done = already, new_tokens = 0;

  // Replies finish out of order; a reorder buffer writes them in prompt order, so the file does not depend on
  // --batch and a resume (which skips the indices already written) sees the same order. Replies still in the
  // buffer when the process dies are simply redone.
  struct Pending {
    std::vector<int64_t> prompt_ids;
    bool finished = false;
    data::GenerationResult reply;
  };
  std::map<int64_t, Pending> pending;  // by prompt index
  std::deque<int64_t> order;           // indices handed to the generator, in prompt order
  size_t cursor = 0;
  auto next = [&](data::BatchPrompt& out) {
    while (cursor < prompts.size()) {
      const data::Prompt& p = prompts[cursor++];
      if (store.has(p.index)) continue;
      if (!held.empty() && held.count(data::prompt_user_text(p))) {
        ++dropped;
        ++done;
        continue;
      }
      const std::string where = input + ": prompt " + std::to_string(p.index);
      out.id = p.index;
      out.stream = static_cast<uint64_t>(p.index);
      out.tokens = data::prompt_token_ids(p, tokenizer.get(), chat.get(), where, model.config());
      pending[p.index].prompt_ids = out.tokens;
      order.push_back(p.index);
      return true;
    }
    return false;
  };
  auto write_ready = [&] {
    while (!order.empty() && pending.at(order.front()).finished) {
      const int64_t index = order.front();
      order.pop_front();
      Pending& w = pending.at(index);
      std::vector<int64_t> ids = std::move(w.prompt_ids);
      const data::GenerationResult& r = w.reply;
      std::vector<int> mask(ids.size(), 0);
      const int64_t prompt_len = static_cast<int64_t>(ids.size());
      ids.insert(ids.end(), r.tokens.begin(), r.tokens.end());
      mask.resize(ids.size(), 1);
      store.append({{"index", index},
                    {"source", source},
                    {"split", split},
                    {"input_ids", ids},
                    {"loss_mask", mask},
                    {"prompt_tokens", prompt_len},
                    {"response_tokens", r.tokens.size()},
                    {"finish", r.hit_eos ? "eos" : "length"}});
      // A folder taken over with fewer JSONL lines than features (copied without its JSONL) already holds this one.
      if (features && !features->covered().count(index)) {
        data::HiddenSample h;
        h.input_ids = at::tensor(ids, at::kLong);
        h.loss_mask = at::tensor(std::vector<int64_t>(mask.begin(), mask.end()), at::kLong).ne(0);
        h.hidden_states = r.features;
        if (h.hidden_states.size(0) != h.input_ids.size(0))
          throw std::logic_error("data regenerate: features of " + std::to_string(h.hidden_states.size(0)) +
                                 " positions for a sample of " + std::to_string(h.input_ids.size(0)));
        features->add(index, std::move(h));
      }
      pending.erase(index);
    }
  };
  // Progress counts replies as they finish, not as they are written: with --batch 64 the reply of the first
  // prompt may finish last, and an in-order count would show an ETA of hours for the first minute.
  auto reply_done = [&](int64_t index, data::GenerationResult&& r) {
    new_tokens += static_cast<int64_t>(r.tokens.size());
    bar.update(++done, new_tokens);
    Pending& w = pending.at(index);
    w.reply = std::move(r);
    w.finished = true;
    write_ready();
  };
  const data::BatchStats stats = data::generate_batched(model, gen, a.i64("batch"), next, reply_done);
  if (!order.empty()) throw std::logic_error("data regenerate: replies left unwritten");
  if (features) features->flush();
  bar.finish();
  const double el = bar.seconds();
  std::fprintf(stderr,
               "regenerated %lld new samples (%lld already present, %lld dropped as held-out overlaps): "
               "%lld tokens in %.1f s = %.1f tokens/s overall, decode %.1f tokens/s (batch %lld, %.2f rows/step)\n",
               static_cast<long long>(done - already - dropped), static_cast<long long>(already),
               static_cast<long long>(dropped), static_cast<long long>(new_tokens), el, el > 0 ? new_tokens / el : 0.0,
               stats.decode_seconds > 0 ? stats.decode_tokens / stats.decode_seconds : 0.0,
               static_cast<long long>(a.i64("batch")),
               stats.decode_steps > 0 ? static_cast<double>(stats.decode_tokens) / stats.decode_steps : 0.0);
  // Where the rest of the wall time went: prompts are prefilled one at a time while the batch waits.
  std::fprintf(stderr, "time: prefill %.1f s (%lld prompt tokens, %.0f tokens/s), batched decode %.1f s, other %.1f s\n",
               stats.prefill_seconds, static_cast<long long>(stats.prefill_tokens),
               stats.prefill_seconds > 0 ? stats.prefill_tokens / stats.prefill_seconds : 0.0, stats.decode_seconds,
               std::max(0.0, el - stats.prefill_seconds - stats.decode_seconds));
  if (features)
    std::fprintf(stderr, "features: %lld samples of this part in %s (target layers %s)\n",
                 static_cast<long long>(features->samples()), a.str("hidden-out").c_str(),
                 data::join_ids(std::vector<int64_t>(capture.begin(), capture.end())).c_str());
  return 0;
}

}  // namespace dflash::cli
