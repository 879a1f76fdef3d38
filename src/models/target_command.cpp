// `dflash target run|generate`: the target model from the command line. `run` dumps logits and captured
// hidden states for a batch of token ids (optionally through the KV cache in prefill + block chunks, with
// rejected-block rollback) so tests can compare against Hugging Face; `generate` is greedy decoding.
#include <ATen/ATen.h>

#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "args.h"
#include "atomic_output.h"
#include "chat_template.h"
#include "models_commands.h"
#include "safetensors.h"
#include "target_loader.h"
#include "target_model.h"
#include "target_options.h"
#include "tokenizer.h"

namespace dflash::models {

using util::Args;

int target_run_main(const std::vector<std::string>& args) {
  Args a("target run", "run the target on token ids and save logits / hidden states to safetensors");
  add_target_options(a, {.tokenizer = false, .eos = false});
  a.option("input", "PATH", "", "safetensors with 'input_ids' [batch, T] int64");
  a.option("output", "PATH", "", "safetensors to write: logits, last_hidden, hidden.<layer>");
  a.option("capture", "LAYERS", "", "comma-separated layer ids whose outputs to save");
  a.option("prefill", "P", "0", "0: one full forward; P > 0: P-token prefill on a KV cache, then blocks");
  a.option("block", "B", "1", "block size after the prefill (1 = token-by-token decode)");
  a.flag("rollback", "before each block, verify a junk block and crop it away (speculative rejection)");
  a.range("prefill", 0, 2147483647, " (0: one full forward)").range("block", 1, 1024);
  if (!a.parse(args)) return 0;
  if (a.given("output")) io::check_output_path(a.str("output"), "target run: --output");  // before any work
  const TargetModel model = load_target(read_target_options(a));
  at::Tensor ids = io::SafetensorsFile::open(a.str("input")).load("input_ids", at::kLong);
  if (ids.dim() != 2) throw std::invalid_argument("input 'input_ids' must be [batch, T]");
  std::vector<int> capture;
  for (auto c : a.i64_list("capture")) capture.push_back(static_cast<int>(c));

  const int64_t T = ids.size(1), P = a.i64("prefill"), B = a.i64("block");
  TargetOutput out;
  if (P <= 0) {
    out = model.forward(ids, nullptr, capture, true, true);
  } else {
    if (P > T || B < 1) throw std::invalid_argument("--prefill must be in [1, T] and --block >= 1");
    KVCache cache = model.make_cache(ids.size(0), T + B);
    std::vector<TargetOutput> parts;
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
  add_target_options(a);
  a.option("prompt-ids", "IDS", "", "comma-separated prompt token ids");
  a.option("prompt", "TEXT", "", "prompt text, sent as one user chat message (decoded reply printed)");
  a.flag("raw", "tokenize --prompt as plain text instead of a chat message");
  a.option("max-new", "N", "32", "maximum new tokens");
  a.range("max-new", 1, 1048576);
  if (!a.parse(args)) return 0;
  const TargetOptions topt = read_target_options(a);
  if (a.given("prompt") == a.given("prompt-ids"))
    throw std::invalid_argument("target generate: give exactly one of --prompt and --prompt-ids");
  std::unique_ptr<tok::Tokenizer> tokenizer;
  std::vector<int64_t> prompt;
  if (a.given("prompt")) {
    tokenizer = load_target_tokenizer(topt);
    if (!tokenizer)
      throw std::invalid_argument("target generate: --prompt needs a tokenizer: " + topt.path +
                                  " has none (no GGUF vocabulary or tokenizer.json); give --tokenizer");
    std::vector<int32_t> ids =
        a.on("raw") ? tokenizer->encode(a.str("prompt"))
                    : tok::ChatFormat::from_tokenizer(*tokenizer).encode(*tokenizer, {{"user", a.str("prompt")}}, true).ids;
    prompt.assign(ids.begin(), ids.end());
  } else {
    prompt = a.i64_list("prompt-ids");
  }
  const TargetModel model = load_target(topt);
  if (prompt.empty()) throw std::invalid_argument("target generate: the prompt is empty");
  for (auto t : prompt)
    if (t < 0 || t >= model.config().vocab_size)
      throw std::invalid_argument("target generate: prompt id " + std::to_string(t) + " outside the vocabulary [0, " +
                                  std::to_string(model.config().vocab_size) + ")");
  std::vector<int64_t> eos;
  if (topt.eos == "config") eos = model.config().eos_token_ids;
  else if (topt.eos != "none") eos = a.i64_list("eos");
  GenerateStats st;
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

}  // namespace dflash::models
