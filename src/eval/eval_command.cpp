// `dflash eval` (eval_run.h): the flags into EvalOptions, and run_eval in named phases.
#include <ATen/ATen.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <algorithm>
#include <limits>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>

#include "args.h"
#include "atomic_output.h"
#include "attention_selfcheck.h"
#include "compute_settings.h"
#include "drafter_attention.h"
#include "drafter_config.h"
#include "drafter_proposer.h"
#include "family_registry.h"
#include "eval_commands.h"
#include "eval_report.h"
#include "eval_run.h"
#include "eval_tracking.h"
#include "family_drafting.h"
#include "family_model.h"
#include "family_registry.h"
#include "llama_cpp_eval.h"
#include "llama_cpp_tools.h"
#include "target_loader.h"
#include "progress.h"
#include "prompt_sources.h"
#include "response_generator.h"
#include "simple_proposers.h"
#include "speculative_decoder.h"
#include "target_io.h"
#include "target_options.h"

namespace dflash::eval {

using util::Args;
namespace {

// What proposes the blocks: the drafter, of whichever family (on its device, with the attention backend chosen for
// it), or a test proposer.
struct ProposerSide {
  std::unique_ptr<LoadedDrafter> drafter;
  std::unique_ptr<Proposer> proposer;
  std::optional<ops::AttentionChoice> attention;
};

ProposerSide make_proposer(const EvalOptions& o, const models::TargetModel& target) {
  ProposerSide s;
  if (o.proposer == "dflash") {
    if (o.drafter.empty()) throw std::invalid_argument("eval: --drafter is required with --proposer dflash");
    const at::Device ddev = o.drafter_device == "target" ? target.input_device()
                                                          : ops::parse_device(o.drafter_device, "eval: --drafter-device");
    s.drafter = std::make_unique<LoadedDrafter>(load_drafter(o.drafter, ddev));
    // The forward self-check at the drafter's shapes, with a context of a 512-token prompt plus --max-new.
    s.attention = drafter::choose_drafter_attention(
        o.attention_backend, s.drafter->config, ddev, s.drafter->weights.fc.scalar_type(),
        {.context_len = 512 + std::max<int64_t>(0, o.max_new), .packed = false, .backward = false});
    std::fprintf(stderr, "%s\n", s.attention->line.c_str());
    s.proposer = std::make_unique<DrafterProposer>(*s.drafter, target,
                                                   DrafterProposerOptions{o.max_draft, s.attention->backend,
                                                                          o.confidence_threshold});
  } else if (o.proposer == "oracle") {
    s.proposer = std::make_unique<OracleProposer>(o.block_size);
  } else if (o.proposer == "random") {
    s.proposer = std::make_unique<RandomProposer>(o.block_size, target.config().vocab_size, o.seed + 17);
  } else {
    throw std::invalid_argument("--proposer must be dflash, oracle or random; got '" + o.proposer + "'");
  }
  return s;
}

// One dataset: every prompt (and repeat) with the target alone, then speculatively, back to back.
DatasetReport evaluate_dataset(const EvalOptions& o, const EvalDataset& ds, const models::TargetModel& target,
                               Proposer& proposer, const tok::Tokenizer* tokenizer, const tok::ChatFormat* chat,
                               const data::GenerationOptions& gen, io::AtomicOutputFile* tokens_out) {
  const auto prompts = data::read_prompts(ds.path, o.limit);
  DatasetReport rep(ds.name, proposer.block_size());
  rep.lossless_checked = o.baseline && gen.temperature <= 0;
  data::Progress bar("eval " + ds.name, static_cast<int64_t>(prompts.size()) * o.repeats);
  int64_t done = 0, toks = 0;
  for (const auto& p : prompts) {
    const std::vector<int64_t> ids =
        data::prompt_token_ids(p, tokenizer, chat, ds.path + ": prompt " + std::to_string(p.index), target.config());
    for (int64_t r = 0; r < o.repeats; ++r) {
      const uint64_t stream = static_cast<uint64_t>(p.index * o.repeats + r);
      // The target alone and with speculation, back to back so both see the same machine load.
      data::GenerationResult base;
      double base_s = 0;
      if (o.baseline) {
        // Its own random stream: an oracle built from this run must not share draws with the check below.
        base = data::generate_response(target, ids, gen, stream + (uint64_t{1} << 40));
        base_s = base.prefill_seconds + base.decode_seconds;
      }
      std::vector<int64_t> ref = ids;
      ref.insert(ref.end(), base.tokens.begin(), base.tokens.end());
      proposer.set_reference(ref);
      const SpecResult spec = speculative_generate(target, proposer, ids, gen, stream, o.max_draft);
      rep.add(spec, base_s, static_cast<int64_t>(base.tokens.size()), p.index);
      Mismatch mm;
      if (rep.lossless_checked && !compare_tokens(base.tokens, spec.tokens, p.index, &mm)) {
        rep.mismatches.push_back(mm);
        std::fprintf(stderr, "\n%s: prompt %lld differs from the target's greedy decode at new token %lld "
                     "(target %lld, speculative %lld)\n", ds.name.c_str(), static_cast<long long>(p.index),
                     static_cast<long long>(mm.position), static_cast<long long>(mm.expected),
                     static_cast<long long>(mm.got));
      }
      if (tokens_out)
        tokens_out->write(nlohmann::json{{"dataset", ds.name}, {"index", p.index}, {"repeat", r},
                                         {"tokens", spec.tokens}, {"baseline", base.tokens},
                                         {"accept_lengths", spec.accept_lengths}}.dump() +
                          "\n");
      toks += static_cast<int64_t>(spec.tokens.size());
      bar.update(++done, toks);
    }
  }
  bar.finish();
  return rep;
}

bool has_engine(const EvalOptions& o, const std::string& e) {
  for (const auto& x : o.engines)
    if (x == e) return true;
  return false;
}

// llama.cpp's settings for this eval: the same prompts, tokens, drafts per cycle and threads as ours.
LlamaCppSettings llama_cpp_settings(const EvalOptions& o) {
  const std::string dir = resolve_drafter_dir(o.drafter);
  const drafter::DrafterConfig dc = drafter::load_drafter_config(dir + "/config.json");
  LlamaCppSettings s;
  s.target_gguf = o.target.path;
  s.draft_gguf = dir + "/draft.gguf";
  if (!std::filesystem::is_regular_file(s.draft_gguf))
    throw std::invalid_argument("eval --engine llama.cpp: " + s.draft_gguf + " is missing: export the drafter with "
                                "dflash export RUN --out " + dir + " --gguf");
  // Our eval verifies max_draft proposals per cycle (0: all, the family's drafts_per_cycle: B-1, or B where every
  // block output is a draft); llama.cpp drafts --spec-draft-n-max per cycle with the same ceilings.
  const int64_t full = drafter::family_of(dc.family).drafts_per_cycle(dc);
  s.draft_max = o.max_draft > 0 ? std::min(o.max_draft, full) : full;
  s.max_new = o.max_new;
  s.threads = std::max<int64_t>(1, o.target.threads);
  return s;
}

std::vector<LlamaCppDatasetReport> evaluate_llama_cpp(const EvalOptions& o, const LlamaCppSettings& s,
                                                      const tok::Tokenizer& tokenizer, const tok::ChatFormat* chat,
                                                      const models::TargetConfig& tcfg) {
  std::vector<LlamaCppDatasetReport> out;
  for (const auto& ds : o.datasets) {
    const auto prompts = data::read_prompts(ds.path, o.limit);
    LlamaCppDatasetReport rep;
    rep.name = ds.name;
    data::Progress bar("llama.cpp " + ds.name, static_cast<int64_t>(prompts.size()));
    int64_t done = 0;
    for (const auto& p : prompts) {
      const std::vector<int64_t> ids =
          data::prompt_token_ids(p, &tokenizer, chat, ds.path + ": prompt " + std::to_string(p.index), tcfg);
      // llama.cpp tokenizes the text again, special tokens included: the chat template's text, not its ids.
      const std::string text = tokenizer.decode(std::vector<int32_t>(ids.begin(), ids.end()), false);
      run_llama_cpp_prompt(s, p.index, text, static_cast<int64_t>(ids.size()), rep);
      bar.update(++done, rep.n_predict);
      if (!rep.differing.empty() && rep.differing.back() == p.index)
        std::fprintf(stderr, "\nllama.cpp %s: prompt %lld: the speculative output differs from the target alone\n",
                     ds.name.c_str(), static_cast<long long>(p.index));
    }
    bar.finish();
    out.push_back(std::move(rep));
  }
  return out;
}

nlohmann::json eval_json(const EvalOptions& o, const ProposerSide* side, const data::GenerationOptions& gen,
                          const std::vector<DatasetReport>& reports, const LlamaCppSettings* llama,
                          const std::vector<LlamaCppDatasetReport>& llama_reports) {
  nlohmann::json j = {{"target", o.target.path},
                      {"engines", o.engines},
                      {"temperature", gen.temperature},
                      {"max_new", gen.max_new},
                      {"max_draft", o.max_draft},
                      {"confidence_threshold", o.confidence_threshold},
                      {"datasets", nlohmann::json::array()}};
  if (side) {
    // block_size: the drafter's B; verified_per_cycle: the family's drafts per cycle + 1 (B + 1 for a family whose
    // B block outputs are all drafts).
    j["drafter"] = side->drafter ? side->drafter->dir : o.proposer;
    j["drafter_family"] = side->drafter ? side->drafter->config.family.name() : o.proposer;
    j["block_size"] = side->drafter ? side->drafter->config.block_size : side->proposer->block_size();
    j["verified_per_cycle"] = side->proposer->block_size();
    if (side->attention)
      j["attention_backend"] = {{"requested", ops::attention_backend_name(side->attention->requested)},
                                {"backend", ops::attention_backend_name(side->attention->backend)},
                                {"device", side->attention->device}, {"line", side->attention->line}};
  }
  for (const auto& r : reports) j["datasets"].push_back(r.to_json());
  if (llama) {
    nlohmann::json l = {{"version", std::string("llama-cpp-python ") + util::kLlamaCppVersion},
                        {"target_gguf", llama->target_gguf},
                        {"draft_gguf", llama->draft_gguf},
                        {"draft_max", llama->draft_max},
                        {"threads", llama->threads},
                        {"datasets", nlohmann::json::array()}};
    for (const auto& r : llama_reports) l["datasets"].push_back(r.to_json());
    j["llama_cpp"] = l;
  }
  return j;
}

// --confidence-threshold's help: which families take it is the plug-ins' answer (Family::has_confidence_cut).
std::string confidence_cut_help() {
  std::string names;
  for (const drafter::Family* f : drafter::registered_families())
    if (f->has_confidence_cut()) names += std::string(names.empty() ? "" : ", ") + f->name();
  return "stop each draft where the cumulative confidence product falls below X (0: off); for a drafter family "
         "with a confidence cut (" + (names.empty() ? std::string("none registered") : names) + ")";
}

}  // namespace

std::vector<EvalDataset> parse_eval_datasets(const std::vector<std::string>& items) {
  std::vector<EvalDataset> out;
  for (const auto& s : items) {
    const auto eq = s.find('=');
    if (eq == std::string::npos) {
      std::string stem = std::filesystem::path(s).filename().string();
      stem = stem.substr(0, stem.find('.'));
      out.push_back({stem, s});
    } else {
      out.push_back({s.substr(0, eq), s.substr(eq + 1)});
    }
    if (out.back().name.empty() || out.back().path.empty())
      throw std::invalid_argument("--data expects NAME=PATH or PATH items, got '" + s + "'");
  }
  if (out.empty()) throw std::invalid_argument("eval: --data is required (NAME=PATH,...)");
  return out;
}

int run_eval(const EvalOptions& o) {
  if (o.repeats < 1) throw std::invalid_argument("--repeats must be >= 1");
  if (o.temperature < 0) throw std::invalid_argument("--temperature must be >= 0");
  if (o.datasets.empty()) throw std::invalid_argument("eval: --data is required (NAME=PATH,...)");
  // The destinations before the target loads: a folder or an empty path fails now, not after the runs.
  if (!o.json.empty()) io::check_output_path(o.json, "eval: --json");
  if (!o.tokens_out.empty()) io::check_output_path(o.tokens_out, "eval: --tokens-out");
  const bool ours = has_engine(o, "dflash");
  std::optional<LlamaCppSettings> llama;
  if (has_engine(o, "llama.cpp")) {
    llama = llama_cpp_settings(o);
    for (const char* program : {"llama-speculative-simple", "llama-completion"})  // before any decode
      (void)util::llama_cpp_program(program, "eval --engine llama.cpp");
  }
  std::optional<models::TargetModel> target;
  if (ours) target.emplace(models::load_target(o.target));
  auto tokenizer = models::load_target_tokenizer(o.target);
  std::unique_ptr<tok::ChatFormat> chat;
  if (tokenizer) chat = std::make_unique<tok::ChatFormat>(tok::ChatFormat::from_tokenizer(*tokenizer));

  data::GenerationOptions gen;
  gen.max_new = o.max_new;
  gen.temperature = o.temperature;
  gen.seed = o.seed;
  std::vector<DatasetReport> reports;
  std::optional<ProposerSide> side;
  if (ours) {
    side.emplace(make_proposer(o, *target));
    gen.eos_ids = data::parse_stop_ids(o.target.eos, *target, tokenizer.get());
    std::unique_ptr<io::AtomicOutputFile> tokens_out;  // whole or absent: committed after the last dataset
    if (!o.tokens_out.empty()) tokens_out = std::make_unique<io::AtomicOutputFile>(o.tokens_out);
    for (const auto& ds : o.datasets)
      reports.push_back(
          evaluate_dataset(o, ds, *target, *side->proposer, tokenizer.get(), chat.get(), gen, tokens_out.get()));
    if (tokens_out) tokens_out->commit();
    print_table(reports);
    print_cycle_breakdown(reports);
  }
  std::vector<LlamaCppDatasetReport> llama_reports;
  if (llama) {
    if (!tokenizer)
      throw std::invalid_argument("eval --engine llama.cpp: " + o.target.path + " has no tokenizer to write the "
                                  "prompts' text with");
    const models::TargetConfig tcfg = target ? target->config() : models::read_target_config(o.target.path);
    llama_reports = evaluate_llama_cpp(o, *llama, *tokenizer, chat.get(), tcfg);
    std::map<std::string, double> our_tau;
    for (const auto& r : reports) our_tau[r.name] = r.tau();
    print_llama_cpp_table(llama_reports, our_tau);
  }
  const nlohmann::json results =
      eval_json(o, side ? &*side : nullptr, gen, reports, llama ? &*llama : nullptr, llama_reports);
  if (!o.json.empty()) io::write_file_atomically(o.json, results.dump(2) + "\n");
  if (ours && o.proposer == "dflash") report_eval_to_trackers(o.drafter, results);
  bool all_lossless = true;
  for (const auto& r : reports) all_lossless = all_lossless && r.mismatches.empty();
  for (const auto& r : llama_reports) all_lossless = all_lossless && r.differing.empty();
  return all_lossless ? 0 : 3;
}

int eval_main(const std::vector<std::string>& args) {
  Args a("eval", "speculative decoding with a drafter vs the target alone: tau, speedup, lossless check");
  const models::TargetOptionSet target_set{
      .single_replica_why = "eval times one decode at a time (tokens/s and speedup of a single sequence)"};
  models::add_target_options(a, target_set);
  a.option("drafter", "PATH", "", "exported drafter folder (config.json + model.safetensors) or a run directory");
  a.option("drafter-device", "DEV", "target", "where the drafter runs: target (the target's first device), cpu, cuda:N");
  a.option("drafter-family", "NAME", "", drafter::registered_family_names() + " (default: the drafter's config.json)");
  a.option("proposer", "KIND", "dflash", "dflash (needs --drafter), oracle or random (tests and baselines)");
  a.option("attention-backend", "NAME", "auto",
           "the drafter's attention: auto (fused after a forward self-check against the reference on its device, "
           "else reference) | fused (refuses when the check fails) | reference");
  a.option("block-size", "B", "16", "block size for the oracle / random proposers");
  a.option("max-draft", "K", "0", "verify only the first K proposals of each block (0: all the drafter family's "
                                  "drafts per cycle, B-1 or B)");
  a.option("confidence-threshold", "X", "0", confidence_cut_help());
  a.option("data", "LIST", "", "datasets, comma-separated NAME=PATH (prompt JSONL, .gz ok)");
  a.option("limit", "N", "-1", "first N prompts of each dataset (-1: all)");
  a.option("max-new", "N", "256", "maximum new tokens per prompt");
  a.option("temperature", "T", "0", "0: greedy (lossless check on); > 0: speculative sampling");
  a.option("seed", "S", "0", "sampling seed");
  a.option("repeats", "N", "1", "run every prompt N times (different random streams), for distribution tests");
  a.option("baseline", "0|1", "1", "also decode with the target alone (speed baseline and lossless check)");
  a.option("json", "FILE", "", "write the results as JSON");
  a.option("tokens-out", "FILE", "", "write the generated tokens per prompt and repeat as JSONL");
  a.option("engine", "NAMES", "dflash",
           "dflash (ours) | llama.cpp (llama-speculative-simple with the drafter folder's draft.gguf from export "
           "--gguf; the target must be a .gguf) | dflash,llama.cpp: both, side by side (docs/EVAL.md)");
  a.range("block-size", 2, 1024).range("max-draft", 0, 1023, " (0: all)").range("limit", -1, 2147483647, " (-1: all)");
  a.range("confidence-threshold", util::closed(0, 1), " (0: off)");
  a.range("max-new", 1, 1048576).range("temperature", util::closed(0, 100), " (0: greedy)");
  a.range("seed", 0, std::numeric_limits<int64_t>::max()).range("repeats", 1, 1000000).range("baseline", 0, 1);
  if (!a.parse(args)) return 0;
  // What the chosen proposer does not read is refused, not dropped: a bad --drafter-device used to pass with oracle.
  if (a.str("proposer") != "dflash")
    a.refuse_given({"drafter", "drafter-device", "attention-backend", "confidence-threshold"},
                   "with --proposer " + a.str("proposer") + " (only --proposer dflash runs a drafter)");
  else
    a.refuse_given({"block-size"}, "with --proposer dflash (the drafter's config.json sets its block size)");
  EvalOptions o;
  o.target = models::read_target_options(a, target_set);
  o.datasets = parse_eval_datasets(a.str_list("data"));
  o.repeats = a.i64("repeats");
  o.baseline = a.i64("baseline") != 0;
  o.attention_backend = ops::parse_attention_backend(a.str("attention-backend"), "eval: --attention-backend");
  o.proposer = a.str("proposer");
  o.drafter = a.str("drafter");
  o.drafter_device = a.str("drafter-device");
  // Checked whatever the proposer (a bad device is never dropped silently) and before the target loads.
  if (o.drafter_device != "target") (void)ops::parse_device(o.drafter_device, "eval: --drafter-device");
  o.drafter_family = a.str("drafter-family");
  if (!o.drafter_family.empty() && o.proposer != "dflash")
    throw std::invalid_argument("eval: --drafter-family applies to --proposer dflash only");
  if (o.proposer == "dflash" && !o.drafter.empty()) {
    // The family before the target and the weights load: a family eval cannot run yet is refused in one line.
    const std::string config = resolve_drafter_dir(o.drafter) + "/config.json";
    const drafter::DrafterConfig dc = drafter::load_drafter_config(config);
    const auto family = drafter::family_for_command("eval", o.drafter_family, dc.family, config);
    if (a.given("confidence-threshold") && !drafter::family_of(family).has_confidence_cut()) {
      std::string takers;  // the families with a confidence cut, as the message names them
      for (const drafter::Family* f : drafter::registered_families())
        if (f->has_confidence_cut()) takers += std::string(takers.empty() ? "" : " or ") + f->name();
      throw std::invalid_argument("eval: --confidence-threshold applies to " + takers + " drafters only (" + config +
                                  " is " + family.name() + ")");
    }
    // What the family cannot draft with (a threshold without a confidence head), before the target loads.
    if (const drafter::FamilyDrafting* d = drafter::model_of(drafter::family_of(family)).drafting())
      d->check(dc, {a.f64("confidence-threshold")}, config);
  }
  o.block_size = a.i64("block-size");
  o.max_draft = a.i64("max-draft");
  o.confidence_threshold = a.f64("confidence-threshold");
  o.limit = a.i64("limit");
  o.max_new = a.i64("max-new");
  o.temperature = a.f64("temperature");
  o.seed = static_cast<uint64_t>(a.i64("seed"));
  o.json = a.str("json");
  o.tokens_out = a.str("tokens-out");
  o.engines.clear();
  for (const auto& e : a.str_list("engine")) {
    if (e != "dflash" && e != "llama.cpp")
      throw std::invalid_argument("eval: --engine: expected dflash, llama.cpp or dflash,llama.cpp, got '" +
                                  a.str("engine") + "'");
    if (std::find(o.engines.begin(), o.engines.end(), e) == o.engines.end()) o.engines.push_back(e);
  }
  if (o.engines.empty()) throw std::invalid_argument("eval: --engine: expected dflash, llama.cpp or dflash,llama.cpp");
  if (std::find(o.engines.begin(), o.engines.end(), "llama.cpp") != o.engines.end()) {
    // What llama.cpp's run cannot honour is refused, not dropped (docs/EVAL.md "llama.cpp").
    auto refuse = [&](bool bad, const std::string& what) {
      if (bad) throw std::invalid_argument("eval: --engine llama.cpp " + what);
    };
    refuse(o.proposer != "dflash" || o.drafter.empty(), "needs --drafter (an export folder with draft.gguf)");
    const std::string& t = o.target.path;
    refuse(t.size() < 5 || t.substr(t.size() - 5) != ".gguf",
           "needs a .gguf target (llama.cpp runs GGUF files), got --target '" + t + "'");
    refuse(o.temperature > 0, "runs greedy decoding only (--temperature 0)");
    refuse(o.repeats != 1, "runs each prompt once (--repeats 1)");
    refuse(o.confidence_threshold > 0,
           "has no cumulative confidence cut (its --spec-draft-p-min cuts per slot): use --confidence-threshold 0");
    refuse(std::find(o.engines.begin(), o.engines.end(), "dflash") == o.engines.end() && !o.tokens_out.empty(),
           "alone writes no --tokens-out (our engine's tokens): add dflash to --engine");
  }
  if (a.given("json") && o.json.empty()) io::check_output_path(o.json, "eval: --json");  // an empty path: refused
  if (a.given("tokens-out") && o.tokens_out.empty()) io::check_output_path(o.tokens_out, "eval: --tokens-out");
  return run_eval(o);
}

}  // namespace dflash::eval
