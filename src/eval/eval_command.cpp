// `dflash eval`: speculative decoding of held-out prompts with the target and a drafter (or a test
// proposer), against the target alone in the same run: tau, acceptance histogram, per-slot acceptance,
// tokens/s, speedup and (at temperature 0) the lossless check, per dataset; --json writes them.
#include <ATen/ATen.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>

#include "args.h"
#include "attention_selfcheck.h"
#include "compute_settings.h"
#include "dflash_proposer.h"
#include "drafter_attention.h"
#include "eval_commands.h"
#include "eval_report.h"
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

struct DatasetArg {
  std::string name, path;
};

std::vector<DatasetArg> parse_datasets(const std::vector<std::string>& items) {
  std::vector<DatasetArg> out;
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

}  // namespace

int eval_main(const std::vector<std::string>& args) {
  Args a("eval", "speculative decoding with a drafter vs the target alone: tau, speedup, lossless check");
  const models::TargetOptionSet target_set{
      .single_replica_why = "eval times one decode at a time (tokens/s and speedup of a single sequence)"};
  models::add_target_options(a, target_set);
  a.option("drafter", "PATH", "", "exported DFlash folder (config.json + model.safetensors) or a run directory");
  a.option("drafter-device", "DEV", "target", "where the drafter runs: target (the target's first device), cpu, cuda:N");
  a.option("proposer", "KIND", "dflash", "dflash (needs --drafter), oracle or random (tests and baselines)");
  a.option("attention-backend", "NAME", "auto",
           "the drafter's attention: auto (fused after a forward self-check against the reference on its device, "
           "else reference) | fused (refuses when the check fails) | reference");
  a.option("block-size", "B", "16", "block size for the oracle / random proposers");
  a.option("max-draft", "K", "0", "verify only the first K proposals of each block (0: all B-1)");
  a.option("data", "LIST", "", "datasets, comma-separated NAME=PATH (prompt JSONL, .gz ok)");
  a.option("limit", "N", "-1", "first N prompts of each dataset (-1: all)");
  a.option("max-new", "N", "256", "maximum new tokens per prompt");
  a.option("temperature", "T", "0", "0: greedy (lossless check on); > 0: speculative sampling");
  a.option("seed", "S", "0", "sampling seed");
  a.option("repeats", "N", "1", "run every prompt N times (different random streams), for distribution tests");
  a.option("baseline", "0|1", "1", "also decode with the target alone (speed baseline and lossless check)");
  a.option("json", "FILE", "", "write the results as JSON");
  a.option("tokens-out", "FILE", "", "write the generated tokens per prompt and repeat as JSONL");
  if (!a.parse(args)) return 0;
  const models::TargetOptions topt = models::read_target_options(a, target_set);
  const auto datasets = parse_datasets(a.str_list("data"));
  const int64_t repeats = a.i64("repeats");
  if (repeats < 1) throw std::invalid_argument("--repeats must be >= 1");
  const bool baseline = a.i64("baseline") != 0;
  const ops::AttentionBackend attention_request =
      ops::parse_attention_backend(a.str("attention-backend"), "eval: --attention-backend");

  const models::TargetModel target = models::load_target(topt);
  auto tokenizer = models::load_target_tokenizer(topt);
  std::unique_ptr<tok::ChatFormat> chat;
  if (tokenizer) chat = std::make_unique<tok::ChatFormat>(tok::ChatFormat::from_tokenizer(*tokenizer));

  std::unique_ptr<eval::LoadedDrafter> drafter;
  std::unique_ptr<eval::Proposer> proposer;
  std::optional<ops::AttentionChoice> attention;
  const std::string kind = a.str("proposer");
  if (kind == "dflash") {
    if (a.str("drafter").empty()) throw std::invalid_argument("eval: --drafter is required with --proposer dflash");
    const at::Device ddev = a.str("drafter-device") == "target"
                                ? target.input_device()
                                : ops::parse_device(a.str("drafter-device"), "eval: --drafter-device");
    drafter = std::make_unique<eval::LoadedDrafter>(eval::load_drafter(a.str("drafter"), ddev));
    // The forward self-check at the drafter's shapes, with a context of a 512-token prompt plus --max-new.
    attention = drafter::choose_drafter_attention(
        attention_request, drafter->config, ddev, drafter->weights.fc.scalar_type(),
        {.context_len = 512 + std::max<int64_t>(0, a.i64("max-new")), .packed = false, .backward = false});
    std::fprintf(stderr, "%s\n", attention->line.c_str());
    proposer = std::make_unique<eval::DFlashProposer>(*drafter, target, a.i64("max-draft"), attention->backend);
  } else if (kind == "oracle") {
    proposer = std::make_unique<eval::OracleProposer>(a.i64("block-size"));
  } else if (kind == "random") {
    proposer = std::make_unique<eval::RandomProposer>(a.i64("block-size"), target.config().vocab_size,
                                                      static_cast<uint64_t>(a.i64("seed")) + 17);
  } else {
    throw std::invalid_argument("--proposer must be dflash, oracle or random; got '" + kind + "'");
  }
  const int64_t B = proposer->block_size();

  data::GenerationOptions gen;
  gen.max_new = a.i64("max-new");
  gen.temperature = a.f64("temperature");
  gen.seed = static_cast<uint64_t>(a.i64("seed"));
  gen.eos_ids = data::parse_stop_ids(topt.eos, target, tokenizer.get());
  if (gen.temperature < 0) throw std::invalid_argument("--temperature must be >= 0");

  std::unique_ptr<std::ofstream> tokens_out;
  if (!a.str("tokens-out").empty()) {
    tokens_out = std::make_unique<std::ofstream>(a.str("tokens-out"));
    if (!*tokens_out) throw std::runtime_error(a.str("tokens-out") + ": cannot open for writing");
  }

  std::vector<eval::DatasetReport> reports;
  for (const auto& ds : datasets) {
    const auto prompts = data::read_prompts(ds.path, a.i64("limit"));
    eval::DatasetReport rep(ds.name, B);
    rep.lossless_checked = baseline && gen.temperature <= 0;
    data::Progress bar("eval " + ds.name, static_cast<int64_t>(prompts.size()) * repeats);
    int64_t done = 0, toks = 0;
    for (const auto& p : prompts) {
      const std::vector<int64_t> ids =
          data::prompt_token_ids(p, tokenizer.get(), chat.get(), ds.path + ": prompt " + std::to_string(p.index), target.config());
      for (int64_t r = 0; r < repeats; ++r) {
        const uint64_t stream = static_cast<uint64_t>(p.index * repeats + r);
        // The target alone and with speculation, back to back so both see the same machine load.
        data::GenerationResult base;
        double base_s = 0;
        if (baseline) {
          // Its own random stream: an oracle built from this run must not share draws with the check below.
          base = data::generate_response(target, ids, gen, stream + (uint64_t{1} << 40));
          base_s = base.prefill_seconds + base.decode_seconds;
        }
        std::vector<int64_t> ref = ids;
        ref.insert(ref.end(), base.tokens.begin(), base.tokens.end());
        proposer->set_reference(ref);
        const eval::SpecResult spec = eval::speculative_generate(target, *proposer, ids, gen, stream, a.i64("max-draft"));
        rep.add(spec, base_s, static_cast<int64_t>(base.tokens.size()), p.index);
        eval::Mismatch mm;
        if (rep.lossless_checked && !eval::compare_tokens(base.tokens, spec.tokens, p.index, &mm)) {
          rep.mismatches.push_back(mm);
          std::fprintf(stderr, "\n%s: prompt %lld differs from the target's greedy decode at new token %lld "
                       "(target %lld, speculative %lld)\n", ds.name.c_str(), static_cast<long long>(p.index),
                       static_cast<long long>(mm.position), static_cast<long long>(mm.expected),
                       static_cast<long long>(mm.got));
        }
        if (tokens_out)
          *tokens_out << nlohmann::json{{"dataset", ds.name}, {"index", p.index}, {"repeat", r},
                                        {"tokens", spec.tokens}, {"baseline", base.tokens},
                                        {"accept_lengths", spec.accept_lengths}}.dump()
                      << "\n";
        toks += static_cast<int64_t>(spec.tokens.size());
        bar.update(++done, toks);
      }
    }
    bar.finish();
    reports.push_back(std::move(rep));
  }
  eval::print_table(reports);
  eval::print_cycle_breakdown(reports);
  if (!a.str("json").empty()) {
    nlohmann::json j = {{"target", topt.path},
                        {"drafter", drafter ? drafter->dir : kind},
                        {"block_size", B},
                        {"temperature", gen.temperature},
                        {"max_new", gen.max_new},
                        {"max_draft", a.i64("max-draft")},
                        {"datasets", nlohmann::json::array()}};
    if (attention)
      j["attention_backend"] = {{"requested", ops::attention_backend_name(attention->requested)},
                                {"backend", ops::attention_backend_name(attention->backend)},
                                {"device", attention->device}, {"line", attention->line}};
    for (const auto& r : reports) j["datasets"].push_back(r.to_json());
    std::ofstream out(a.str("json"));
    if (!out) throw std::runtime_error(a.str("json") + ": cannot open for writing");
    out << j.dump(2) << "\n";
  }
  bool all_lossless = true;
  for (const auto& r : reports) all_lossless = all_lossless && r.mismatches.empty();
  return all_lossless ? 0 : 3;
}

}  // namespace dflash::eval
