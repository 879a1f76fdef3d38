#include "subcommands.h"

#include <cstdio>
#include <stdexcept>

namespace dflash::cli {

int bench_attention_main(const std::vector<std::string>& args);
int plan_main(const std::vector<std::string>& args);
int bench_step_main(const std::vector<std::string>& args);
int drafter_selftest_main(const std::vector<std::string>& args);
int safetensors_info_main(const std::vector<std::string>& args);
int safetensors_copy_main(const std::vector<std::string>& args);
int target_run_main(const std::vector<std::string>& args);
int target_generate_main(const std::vector<std::string>& args);
int gguf_info_main(const std::vector<std::string>& args);
int gguf_dequant_main(const std::vector<std::string>& args);
int tokenize_main(const std::vector<std::string>& args);
int train_main(const std::vector<std::string>& args);
int export_main(const std::vector<std::string>& args);
int plot_main(const std::vector<std::string>& args);
int data_regenerate_main(const std::vector<std::string>& args);
int data_dump_hidden_main(const std::vector<std::string>& args);
int eval_main(const std::vector<std::string>& args);
int bench_decode_main(const std::vector<std::string>& args);

const std::vector<Subcommand>& subcommands() {
  static const std::vector<Subcommand> table = {
      {{"plan"}, "predicted peak training memory of the drafter (breakdown, --budget, presets)", &plan_main},
      {{"bench", "step"}, "drafter forward+backward per checkpoint policy: time, measured vs planned memory", &bench_step_main},
      {{"drafter", "selftest"}, "internal: one drafter training step on a saved batch (tests)", &drafter_selftest_main},
      {{"bench", "attention"}, "fused anchor-block attention vs dense / per-block SDPA / flex, time and memory",
       &bench_attention_main},
      {{"safetensors", "info"}, "validate a safetensors file and list its tensors", &safetensors_info_main},
      {{"safetensors", "copy"}, "re-write a safetensors file through the dflash reader and writer", &safetensors_copy_main},
      {{"gguf", "info"}, "validate a GGUF file and print its metadata and tensors", &gguf_info_main},
      {{"gguf", "dequant"}, "write one GGUF tensor dequantised to raw float32", &gguf_dequant_main},
      {{"tokenize"}, "tokenize JSONL text (or chat) with a GGUF or tokenizer.json vocabulary", &tokenize_main},
      {{"target", "run"}, "run the target on token ids, save logits and hidden states (tests)", &target_run_main},
      {{"target", "generate"}, "greedy generation with the target model, reports tokens/s", &target_generate_main},
      {{"train"}, "train a DFlash drafter (online target or offline hidden states; docs/TRAINING.md)", &train_main},
      {{"export"}, "write a training run's latest checkpoint as an HF drafter folder", &export_main},
      {{"plot"}, "PNG curves (loss, accuracy) of a training run's metrics.jsonl", &plot_main},
      {{"data", "regenerate"}, "the target's own replies to prompts as training samples (resumable)", &data_regenerate_main},
      {{"data", "dump-hidden"}, "target hidden states of samples as offline training shards (resumable)",
       &data_dump_hidden_main},
      {{"eval"}, "speculative decoding with a drafter: tau, speedup, lossless check per dataset", &eval_main},
      {{"bench", "decode"}, "target greedy decode tokens/s: dflash vs Hugging Face transformers", &bench_decode_main},
  };
  return table;
}

namespace {

void print_usage(FILE* out, const std::vector<std::string>& prefix) {
  std::fprintf(out, "usage: dflash <subcommand> [options]   (dflash <subcommand> --help for its options)\n\n");
  for (const auto& c : subcommands()) {
    bool match = prefix.size() <= c.path.size();
    for (size_t i = 0; match && i < prefix.size(); ++i) match = c.path[i] == prefix[i];
    if (!match) continue;
    std::string name;
    for (const auto& p : c.path) name += (name.empty() ? "" : " ") + p;
    std::fprintf(out, "  %-22s %s\n", name.c_str(), c.summary);
  }
}

}  // namespace

int dispatch(const std::vector<std::string>& args) {
  if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    print_usage(stdout, {});
    return args.empty() ? 2 : 0;
  }
  const Subcommand* best = nullptr;
  for (const auto& c : subcommands()) {
    if (c.path.size() > args.size()) continue;
    bool match = true;
    for (size_t i = 0; match && i < c.path.size(); ++i) match = c.path[i] == args[i];
    if (match && (!best || c.path.size() > best->path.size())) best = &c;
  }
  if (!best) {
    // A group word alone ("dflash bench") or with --help lists the group's entries.
    const std::vector<std::string> group{args[0]};
    const bool asked_help = args.size() == 1 || args[1] == "--help" || args[1] == "-h";
    bool known_group = false;
    for (const auto& c : subcommands()) known_group = known_group || (c.path.size() > 1 && c.path[0] == args[0]);
    if (known_group && asked_help) {
      print_usage(stdout, group);
      return args.size() == 1 ? 2 : 0;
    }
    std::fprintf(stderr, "dflash: unknown subcommand '%s'\n", args.size() > 1 ? (args[0] + " " + args[1]).c_str()
                                                                              : args[0].c_str());
    print_usage(stderr, known_group ? group : std::vector<std::string>{});
    return 2;
  }
  return best->run(std::vector<std::string>(args.begin() + best->path.size(), args.end()));
}

}  // namespace dflash::cli
