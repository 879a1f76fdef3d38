// `dflash bench decode`: greedy decode tokens/s of the C++ target vs Hugging Face transformers on the same
// model, prompt and thread count, in one run (so both see the same machine). Also checks both produced the
// same tokens (they should: same dequantised weights, greedy). With --batch, also the batched decode step
// (regenerate's) with the fused decode-attention kernel vs per-sequence SDPA, side by side. With
// --prefill-lengths, also the prefill tokens/s of prompts of those lengths, dflash vs transformers.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "args.h"
#include "atomic_output.h"
#include "eval_commands.h"
#include "python_driver.h"
#include "response_generator.h"
#include "target_options.h"

namespace dflash::eval {

using util::Args;
namespace {

// N sequences of different lengths (sequence b's prompt is the prompt repeated b % 4 + 1 times), prefilled
// one by one, then `steps` greedy decode_batch steps, once with each attention path on fresh caches.
// Returns the rows per second of both, their ratio and whether they chose the same tokens.
nlohmann::json bench_batched(const models::TargetModel& model, const std::vector<int64_t>& prompt, int64_t n,
                             int64_t steps) {
  using clock = std::chrono::steady_clock;
  auto run = [&](bool fused, std::vector<std::vector<int64_t>>& chosen) {
    std::vector<models::KVCache> caches;
    std::vector<models::KVCache*> ptrs;
    std::vector<int64_t> last;
    for (int64_t b = 0; b < n; ++b) {
      std::vector<int64_t> ids;
      for (int64_t r = 0; r <= b % 4; ++r) ids.insert(ids.end(), prompt.begin(), prompt.end());
      caches.push_back(model.make_cache(1, int64_t(ids.size()) + steps));
      const auto o = model.forward(at::tensor(ids, at::kLong).view({1, -1}), &caches.back(), {}, false, true);
      last.push_back(model.lm_head(o.last_hidden.narrow(1, -1, 1)).argmax(-1).item<int64_t>());
    }
    for (auto& c : caches) ptrs.push_back(&c);
    chosen.assign(size_t(n), {});
    const auto t0 = clock::now();
    for (int64_t s = 0; s < steps; ++s) {
      const at::Tensor next = model.decode_batch(last, ptrs, fused).argmax(-1).contiguous();
      for (int64_t b = 0; b < n; ++b) chosen[size_t(b)].push_back(last[size_t(b)] = next[b].item<int64_t>());
    }
    return double(n * steps) / std::chrono::duration<double>(clock::now() - t0).count();
  };
  // Alternate the two paths (reference, fused, reference, ...) and take the median of the per-pair ratios,
  // so a drift in the machine's speed during the run does not favour either.
  std::vector<std::vector<int64_t>> fused_tokens, reference_tokens;
  std::vector<double> refs, fuseds, ratios;
  for (int r = 0; r < 3; ++r) {
    refs.push_back(run(false, reference_tokens));
    fuseds.push_back(run(true, fused_tokens));
    ratios.push_back(fuseds.back() / refs.back());
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  const double ref = median(refs), fused = median(fuseds), ratio = median(ratios);
  const bool same = fused_tokens == reference_tokens;
  std::printf("batch %lld      fused decode attention %7.1f rows/s, per-sequence SDPA %7.1f rows/s (medians of 3 "
              "alternating runs): %.2fx (pairs: %.2f %.2f %.2f)   identical tokens: %s\n", static_cast<long long>(n),
              fused, ref, ratio, ratios[0], ratios[1], ratios[2], same ? "yes" : "no");
  return {{"batch", n}, {"steps", steps}, {"fused_rows_per_s", fused}, {"per_sequence_rows_per_s", ref},
          {"ratio", ratio}, {"pair_ratios", ratios}, {"same_tokens", same}};
}

// Prompt token i of a synthetic prompt (the same formula in bench_decode_hf.py).
int64_t synthetic_token(int64_t i, int64_t vocab) { return (i * 7919 + 13) % vocab; }

// Prefill of a T-token prompt (forward on a fresh cache, then the LM head of the last position) for each T, on
// our side; then the same prompts in transformers (one Python run). After a warm-up forward, each length is
// timed `repeats` times and the medians are reported (a shared machine's speed drifts). A hybrid target also
// reports its Gated DeltaNet state and what a 16-token verification keeps for rollback.
nlohmann::json bench_prefill(const models::TargetModel& model, const std::string& path, const std::vector<int64_t>& lengths,
                             int64_t threads, bool skip_hf) {
  using clock = std::chrono::steady_clock;
  constexpr int repeats = 3;
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  nlohmann::json rows = nlohmann::json::array();
  std::string joined;
  for (int64_t T : lengths)
    if (T < 1) throw std::invalid_argument("bench decode: --prefill-lengths must be positive");
  {
    models::KVCache warm = model.make_cache(1, 64);
    model.forward(at::arange(64, at::kLong).remainder(model.config().vocab_size).view({1, -1}), &warm, {}, false, true);
  }
  for (int64_t T : lengths) {
    joined += (joined.empty() ? "" : ",") + std::to_string(T);
    std::vector<int64_t> ids(static_cast<size_t>(T));
    for (int64_t i = 0; i < T; ++i) ids[size_t(i)] = synthetic_token(i, model.config().vocab_size);
    std::vector<double> walls, cpus;
    int64_t next = -1;
    models::KVCache cache;
    for (int r = 0; r < repeats; ++r) {
      cache = model.make_cache(1, T + 16);
      const std::clock_t c0 = std::clock();
      const auto t0 = clock::now();
      const auto o = model.forward(at::tensor(ids, at::kLong).view({1, -1}), &cache, {}, false, true);
      next = model.lm_head(o.last_hidden.narrow(1, -1, 1)).argmax(-1).item<int64_t>();
      walls.push_back(std::chrono::duration<double>(clock::now() - t0).count());
      cpus.push_back(static_cast<double>(std::clock() - c0) / CLOCKS_PER_SEC);
    }
    nlohmann::json row = {{"T", T}, {"dflash_tokens_per_s", T / median(walls)},
                          {"dflash_tokens_per_cpu_s", T / median(cpus)}, {"dflash_next_token", next}};
    if (model.config().info().hybrid) {
      model.forward(at::full({1, 16}, next, at::kLong), &cache, {}, false, false);
      row["linear_state_bytes"] = cache.linear_state_bytes();
      row["rollback_bytes_verify16"] = cache.rollback_bytes();
    }
    rows.push_back(row);
  }
  if (!skip_hf) {
    const auto py = util::run_python("bench_decode_hf.py", {path, "prefill", joined, std::to_string(threads)});
    if (py.exit_code != 0)
      throw std::runtime_error("bench decode: the transformers prefill run failed (exit " + std::to_string(py.exit_code) + ")");
    const auto hf = nlohmann::json::parse(py.stdout_text.substr(py.stdout_text.rfind("\n{") + 1));
    for (size_t i = 0; i < rows.size(); ++i) {
      const auto& h = hf.at("prefill").at(i);
      rows[i]["hf_tokens_per_s"] = h.at("tokens_per_s");
      rows[i]["hf_tokens_per_cpu_s"] = h.at("tokens_per_cpu_s");
      rows[i]["speed_ratio"] = rows[i]["dflash_tokens_per_s"].get<double>() / h.at("tokens_per_s").get<double>();
      rows[i]["cpu_speed_ratio"] =
          rows[i]["dflash_tokens_per_cpu_s"].get<double>() / h.at("tokens_per_cpu_s").get<double>();
      rows[i]["same_next_token"] = h.at("next_token").get<int64_t>() == rows[i]["dflash_next_token"].get<int64_t>();
    }
  }
  std::printf("prefill T   dflash tokens/s (wall / CPU)   transformers tokens/s (wall / CPU)   ratio (wall / CPU)   same next token\n");
  for (const auto& r : rows) {
    if (skip_hf) {
      std::printf("%9lld   %9.1f / %9.1f\n", (long long)r["T"].get<int64_t>(), r["dflash_tokens_per_s"].get<double>(),
                  r["dflash_tokens_per_cpu_s"].get<double>());
      continue;
    }
    std::printf("%9lld   %9.1f / %9.1f          %9.1f / %9.1f            %5.2fx / %5.2fx      %s\n",
                (long long)r["T"].get<int64_t>(), r["dflash_tokens_per_s"].get<double>(),
                r["dflash_tokens_per_cpu_s"].get<double>(), r["hf_tokens_per_s"].get<double>(),
                r["hf_tokens_per_cpu_s"].get<double>(), r["speed_ratio"].get<double>(), r["cpu_speed_ratio"].get<double>(),
                r["same_next_token"].get<bool>() ? "yes" : "no");
  }
  if (model.config().info().hybrid && !rows.empty())
    std::printf("Gated DeltaNet state per sequence: %.2f MB; kept for rollback after a 16-token verify: %.2f MB\n",
                rows.back()["linear_state_bytes"].get<double>() / 1e6, rows.back()["rollback_bytes_verify16"].get<double>() / 1e6);
  return rows;
}

}  // namespace

int bench_decode_main(const std::vector<std::string>& args) {
  Args a("bench decode", "target greedy decode tokens/s: dflash (C++) vs Hugging Face transformers");
  const models::TargetOptionSet target_set{
      .tokenizer = false, .eos = false, .single_replica_why = "bench decode times one copy of the target"};
  models::add_target_options(a, target_set);
  a.option("prompt-ids", "IDS", "1,9690,198,2683,359,253,5356", "comma-separated prompt token ids");
  a.option("new-tokens", "N", "64", "tokens to decode (no early stop)");
  a.option("skip-hf", "0|1", "0", "1: only the C++ side");
  a.option("batch", "N", "0",
           "also time N sequences decoded together (as regenerate does): fused decode attention vs per-sequence SDPA");
  a.option("prefill-lengths", "LIST", "", "also time the prefill of T-token prompts for each T (e.g. 512,2048,8192)");
  a.option("json", "FILE", "", "write the results as JSON");
  a.range("new-tokens", 1, 1048576).range("skip-hf", 0, 1).range("batch", 0, 4096, " (0: no batched run)");
  if (!a.parse(args)) return 0;
  if (a.given("json")) io::check_output_path(a.str("json"), "bench decode: --json");  // before the target loads
  const models::TargetOptions topt = models::read_target_options(a, target_set);  // --threads applies to both sides
  const int64_t threads = topt.threads, n = a.i64("new-tokens");
  models::TargetModel model = models::load_target(topt);
  data::GenerationOptions gen;
  gen.max_new = n;
  // CPU time as well as wall time: on a shared machine the CPU-time rate is the one that does not depend on
  // what else runs (with one thread, CPU seconds = seconds this decode actually computed).
  const std::clock_t c0 = std::clock();
  const auto r = data::generate_response(model, a.i64_list("prompt-ids"), gen, 0);
  const double cpu_s = static_cast<double>(std::clock() - c0) / CLOCKS_PER_SEC;
  const double ours = r.decode_seconds > 0 ? (static_cast<double>(r.tokens.size()) - 1) / r.decode_seconds : 0;
  const double ours_cpu = cpu_s > 0 ? static_cast<double>(r.tokens.size()) / cpu_s : 0;
  nlohmann::json out = {{"model", topt.path}, {"threads", at::get_num_threads()}, {"new_tokens", n},
                        {"dflash_tokens_per_s", ours}, {"dflash_tokens_per_cpu_s", ours_cpu}};
  std::printf("dflash        %7.1f tokens/s wall, %7.1f per CPU second (%lld tokens, %d threads)\n", ours, ours_cpu,
              static_cast<long long>(n), at::get_num_threads());
  if (a.i64("skip-hf") == 0) {
    const auto py = util::run_python("bench_decode_hf.py",
                               {topt.path, a.str("prompt-ids"), std::to_string(n), std::to_string(threads)});
    if (py.exit_code != 0) throw std::runtime_error("bench decode: the transformers run failed (exit " +
                                                    std::to_string(py.exit_code) + ")");
    const auto hf = nlohmann::json::parse(py.stdout_text.substr(py.stdout_text.rfind('{')));
    const double theirs = hf.at("tokens_per_s").get<double>();
    const double theirs_cpu = hf.at("tokens_per_cpu_s").get<double>();
    out["hf_tokens_per_cpu_s"] = theirs_cpu;
    out["cpu_speed_ratio"] = theirs_cpu > 0 ? ours_cpu / theirs_cpu : 0.0;
    const bool same = hf.at("tokens").get<std::vector<int64_t>>() == r.tokens;
    out["hf_tokens_per_s"] = theirs;
    out["speed_ratio"] = theirs > 0 ? ours / theirs : 0.0;
    out["same_tokens"] = same;
    std::printf("transformers  %7.1f tokens/s wall, %7.1f per CPU second\nratio         %7.2fx wall, %.2fx CPU   "
                "identical tokens: %s\n", theirs, theirs_cpu, theirs > 0 ? ours / theirs : 0.0,
                theirs_cpu > 0 ? ours_cpu / theirs_cpu : 0.0, same ? "yes" : "no");
  }
  if (!a.str("prefill-lengths").empty())
    out["prefill"] = bench_prefill(model, topt.path, a.i64_list("prefill-lengths"), threads, a.i64("skip-hf") != 0);
  if (a.i64("batch") > 0) {
    model.enable_onednn_decode();  // as regenerate runs it; the single-sequence decode above never uses it
    out["batched"] = bench_batched(model, a.i64_list("prompt-ids"), a.i64("batch"), n);
  }
  if (!a.str("json").empty()) io::write_file_atomically(a.str("json"), out.dump(2) + "\n");
  return 0;
}

}  // namespace dflash::eval
