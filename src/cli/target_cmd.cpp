// `dflash target run|generate`: the target model from the command line. `run` dumps logits and captured
// hidden states for a batch of token ids (optionally through the KV cache in prefill + block chunks, with
// rejected-block rollback) so tests can compare against Hugging Face; `generate` is greedy decoding.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <cstdio>
#include <optional>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "args.h"
#include "chat_template.h"
#include "safetensors.h"
#include "target_loader.h"
#include "target_model.h"
#include "tokenizer.h"

namespace dflash::cli {
namespace {

at::ScalarType parse_dtype(const std::string& s) {
  if (s == "f32" || s == "float32") return at::kFloat;
  if (s == "bf16" || s == "bfloat16") return at::kBFloat16;
  if (s == "f16" || s == "float16") return at::kHalf;
  if (s == "f64" || s == "float64") return at::kDouble;
  throw std::invalid_argument("--dtype must be one of f32, bf16, f16, f64; got '" + s + "'");
}

void common_options(Args& a) {
  a.option("model", "PATH", "", "Hugging Face folder (config.json + safetensors) or a .gguf file");
  a.option("dtype", "TYPE", "f32", "compute dtype: f32, bf16, f16, f64");
  a.option("stages", "N", "1", "pipeline stages on CPU (split layers evenly)");
  a.option("devices", "LIST", "", "one pipeline stage per device, e.g. cuda:0,cuda:1 (overrides --stages)");
  a.option("threads", "N", "0", "intra-op threads (0: LibTorch default)");
}

models::TargetModel load_from_args(const Args& a) {
  if (a.i64("threads") > 0) at::set_num_threads(static_cast<int>(a.i64("threads")));
  models::TargetLoadOptions opts;
  opts.dtype = parse_dtype(a.str("dtype"));
  const int64_t n = a.i64("stages");
  if (n < 1) throw std::invalid_argument("--stages must be >= 1");
  std::vector<at::Device> devices(static_cast<size_t>(n), at::kCPU);
  if (a.given("devices")) {
    devices.clear();
    for (const auto& d : a.str_list("devices")) devices.emplace_back(d);
    if (devices.empty()) throw std::invalid_argument("--devices needs at least one device, e.g. cpu or cuda:0");
  }
  if (devices.size() > 1 || devices.front() != at::Device(at::kCPU))
    opts.stages = models::split_layers(static_cast<int>(models::read_target_config(a.str("model")).num_hidden_layers),
                                       devices);
  return models::load_target(a.str("model"), opts);
}

}  // namespace

int target_run_main(const std::vector<std::string>& args) {
  Args a("target run", "run the target on token ids and save logits / hidden states to safetensors");
  common_options(a);
  a.option("input", "PATH", "", "safetensors with 'input_ids' [batch, T] int64");
  a.option("output", "PATH", "", "safetensors to write: logits, last_hidden, hidden.<layer>");
  a.option("capture", "LAYERS", "", "comma-separated layer ids whose outputs to save");
  a.option("prefill", "P", "0", "0: one full forward; P > 0: P-token prefill on a KV cache, then blocks");
  a.option("block", "B", "1", "block size after the prefill (1 = token-by-token decode)");
  a.flag("rollback", "before each block, verify a junk block and crop it away (speculative rejection)");
  if (!a.parse(args)) return 0;
  models::TargetModel model = load_from_args(a);
  at::Tensor ids = io::SafetensorsFile::open(a.str("input")).load("input_ids", at::kLong);
  if (ids.dim() != 2) throw std::invalid_argument("input 'input_ids' must be [batch, T]");
  std::vector<int> capture;
  for (auto c : a.i64_list("capture")) capture.push_back(static_cast<int>(c));

  const int64_t T = ids.size(1), P = a.i64("prefill"), B = a.i64("block");
  models::TargetOutput out;
  if (P <= 0) {
    out = model.forward(ids, nullptr, capture, true, true);
  } else {
    if (P > T || B < 1) throw std::invalid_argument("--prefill must be in [1, T] and --block >= 1");
    models::KVCache cache = model.make_cache(ids.size(0), T + B);
    std::vector<models::TargetOutput> parts;
    parts.push_back(model.forward(ids.narrow(1, 0, P), &cache, capture, true, true));
    for (int64_t s = P; s < T; s += B) {
      const int64_t n = std::min(B, T - s);
      at::Tensor block = ids.narrow(1, s, n);
      if (a.on("rollback")) {
        const int64_t before = cache.length();
        at::Tensor junk = (block + 1).remainder(model.config().vocab_size);
        model.forward(junk, &cache, capture, true, true);
        cache.crop(before);
      }
      parts.push_back(model.forward(block, &cache, capture, true, true));
    }
    std::vector<at::Tensor> logits, last;
    for (auto& p : parts) logits.push_back(p.logits), last.push_back(p.last_hidden);
    out.logits = at::cat(logits, 1);
    out.last_hidden = at::cat(last, 1);
    for (int c : capture) {
      std::vector<at::Tensor> hs;
      for (auto& p : parts) hs.push_back(p.hidden.at(c));
      out.hidden[c] = at::cat(hs, 1);
    }
  }
  std::vector<std::pair<std::string, at::Tensor>> tensors = {{"logits", out.logits},
                                                             {"last_hidden", out.last_hidden}};
  for (const auto& [i, h] : out.hidden) tensors.emplace_back("hidden." + std::to_string(i), h);
  io::save_safetensors(a.str("output"), tensors);
  return 0;
}

int target_generate_main(const std::vector<std::string>& args) {
  Args a("target generate", "greedy generation with the target; prints the new token ids and tokens/s");
  common_options(a);
  a.option("prompt-ids", "IDS", "", "comma-separated prompt token ids");
  a.option("prompt", "TEXT", "", "prompt text, sent as one user chat message (decoded reply printed)");
  a.option("tokenizer", "PATH", "", "tokenizer .gguf or tokenizer.json (default: the model's GGUF or MODEL/tokenizer.json)");
  a.flag("raw", "tokenize --prompt as plain text instead of a chat message");
  a.option("max-new", "N", "32", "maximum new tokens");
  a.option("eos", "IDS", "config", "stop ids: 'config' (from the model), 'none', or comma-separated ids");
  if (!a.parse(args)) return 0;
  if (a.given("prompt") == a.given("prompt-ids"))
    throw std::invalid_argument("target generate: give exactly one of --prompt and --prompt-ids");
  std::optional<tok::Tokenizer> tokenizer;
  std::vector<int64_t> prompt;
  if (a.given("prompt")) {
    std::string tpath = a.str("tokenizer");
    if (tpath.empty())
      tpath = std::filesystem::is_directory(a.str("model"))
                  ? (std::filesystem::path(a.str("model")) / "tokenizer.json").string()
                  : a.str("model");
    tokenizer = tok::Tokenizer::load(tpath);
    std::vector<int32_t> ids =
        a.on("raw") ? tokenizer->encode(a.str("prompt"))
                    : tok::ChatFormat::from_tokenizer(*tokenizer).encode(*tokenizer, {{"user", a.str("prompt")}}, true).ids;
    prompt.assign(ids.begin(), ids.end());
  } else {
    prompt = a.i64_list("prompt-ids");
  }
  models::TargetModel model = load_from_args(a);
  if (prompt.empty()) throw std::invalid_argument("target generate: the prompt is empty");
  for (auto t : prompt)
    if (t < 0 || t >= model.config().vocab_size)
      throw std::invalid_argument("target generate: prompt id " + std::to_string(t) + " outside the vocabulary [0, " +
                                  std::to_string(model.config().vocab_size) + ")");
  std::vector<int64_t> eos;
  if (a.str("eos") == "config") eos = model.config().eos_token_ids;
  else if (a.str("eos") != "none") eos = a.i64_list("eos");
  models::GenerateStats st;
  std::vector<int64_t> ids = model.generate(prompt, a.i64("max-new"), eos, &st);
  std::string line;
  for (auto t : ids) line += (line.empty() ? "" : " ") + std::to_string(t);
  if (tokenizer) {
    std::printf("%s\n", tokenizer->decode(std::vector<int32_t>(ids.begin(), ids.end()), true).c_str());
    std::fprintf(stderr, "ids: %s\n", line.c_str());
  } else {
    std::printf("%s\n", line.c_str());
  }
  std::fprintf(stderr, "prompt %lld tokens in %.3f s; %lld new tokens in %.3f s (%.1f tokens/s)\n",
               static_cast<long long>(st.prompt_tokens), st.prefill_seconds, static_cast<long long>(st.new_tokens),
               st.decode_seconds,
               st.new_tokens > 1 && st.decode_seconds > 0 ? (st.new_tokens - 1) / st.decode_seconds : 0.0);
  return 0;
}

}  // namespace dflash::cli
