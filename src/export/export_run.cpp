#include "export_run.h"

#include <cstdio>
#include <filesystem>
#include <memory>
#include <stdexcept>

#include "checkpoint.h"
#include "compute_settings.h"
#include "drafter_config.h"
#include "drafter_weights.h"
#include "family_registry.h"
#include "hf_export.h"
#include "output_folder.h"
#include "llama_cpp_convert.h"
#include "serving_engines.h"
#include "train_config.h"

namespace fs = std::filesystem;

namespace dflash::exporting {

using namespace dflash::train;  // a run's checkpoint and draft vocabulary, as training wrote them

namespace {

// Refuses, in one line naming them, the engines of --engine that would read this export differently from what was
// trained (serving_engines.h's table).
// --engine "" (the default): the engines that serve the run's family; with --gguf, llama.cpp is always checked.
void check_engines(const drafter::DrafterConfig& c, const std::string& engine_flag, bool gguf,
                   const std::string& config_path) {
  drafter::ExportTraits t;
  t.family = c.family.name();
  std::vector<std::string> engines = engine_flag.empty() ? drafter::engines_for_family(t.family)
                                                         : drafter::parse_engine_list(engine_flag, "export: --engine");
  bool has_llama_cpp = false;
  for (const auto& e : engines) has_llama_cpp |= e == "llama.cpp";
  if (gguf && !has_llama_cpp) engines.push_back("llama.cpp");
  drafter::family_of(c.family).describe_for_engines(c, t);
  for (const auto& lt : c.layer_types) t.sliding_layers |= lt == "sliding_attention";
  t.draft_vocab = c.draft_vocab_size > 0;
  for (auto id : c.target_layer_ids) t.last_target_layer |= id == c.num_target_layers - 1;
  std::string refused;
  for (const auto& e : engines) {
    const std::string why = drafter::engine_refusal(t, e);
    if (!why.empty()) (refused += refused.empty() ? "" : "; ") += e + " (" + why + ")";
  }
  if (refused.empty()) return;
  std::string what = t.draft_vocab ? "a draft-vocabulary run (draft_vocab_size " + std::to_string(c.draft_vocab_size) + ")"
                                   : std::string("this run");
  if (t.last_target_layer) what += " with the target's last layer in target_layer_ids";
  const std::vector<std::string> serving = drafter::engines_serving(t);
  std::string flag;
  for (const auto& e : serving) (flag += flag.empty() ? "" : ",") += e;
  throw std::invalid_argument("export: " + config_path + ": " + what + " would be read differently from what was "
                              "trained by " + refused + "; " +
                              (serving.empty() ? std::string("no engine reads it as trained")
                                               : "export it with --engine " + flag) + " (docs/SERVING.md)");
}

// The anchors per sequence the run trained with (its train_config.json): DeepSpec's Qwen3DSparkModel requires them.
int64_t run_num_anchors(const std::string& run_dir) {
  const std::string path = (fs::path(run_dir) / "train_config.json").string();
  if (!fs::exists(path))
    throw std::invalid_argument("export: " + path + ": missing; a DSpark export writes the run's num_anchors from it "
                                "(DeepSpec's Qwen3DSparkModel requires config.num_anchors)");
  TrainConfig c;
  apply_config_file(c, path);
  return c.num_anchors;
}

}  // namespace

void export_run(const std::string& run_dir, const std::string& out_dir, const ExportOptions& o) {
  util::check_output_folder_use(out_dir, "export: --out", util::OutputFolderUse::Export, o.force);
  const std::string config_path = (fs::path(run_dir) / "drafter_config.json").string();
  auto dcfg = drafter::load_drafter_config(config_path);
  check_engines(dcfg, o.engines, o.gguf, config_path);
  // With --gguf, everything the conversion needs is found before any file is written: llama.cpp's converter and
  // the target's config and tokenizer in the form the converter reads (llama_cpp_convert.h).
  std::unique_ptr<ConverterTarget> converter_target;
  if (o.gguf) converter_target = std::make_unique<ConverterTarget>(run_dir, o.target);
  if (o.max_position_embeddings < 0)
    throw std::invalid_argument("export: --max-position-embeddings must be a positive context length, got " +
                                std::to_string(o.max_position_embeddings));
  if (o.max_position_embeddings > 0) {
    if (dcfg.max_position_embeddings > 0 && dcfg.max_position_embeddings != o.max_position_embeddings)
      throw std::invalid_argument("export: --max-position-embeddings " + std::to_string(o.max_position_embeddings) +
                                  " differs from " + config_path + "'s max_position_embeddings " +
                                  std::to_string(dcfg.max_position_embeddings) + " (the target's context length)");
    dcfg.max_position_embeddings = o.max_position_embeddings;
  }
  if (dcfg.max_position_embeddings <= 0)
    throw std::invalid_argument("export: " + config_path + ": max_position_embeddings is unknown (the target gave no "
                                "context length); engines size the drafter's RoPE table from it: give the target's "
                                "context length with --max-position-embeddings N");
  std::string path;
  const TrainState st = load_latest_checkpoint(run_dir, &path);
  const at::ScalarType dt = ops::parse_dtype(o.dtype.empty() ? dcfg.torch_dtype : o.dtype, "export: --dtype");
  std::vector<std::string> names;
  for (const auto& [n, t] : st.master) names.push_back(n);
  // Straight from the master weights (fp32, or fp64 for fp64 runs) to `dt`: exact for fp64, rounded once for
  // bf16/fp16, never through an intermediate dtype.
  const auto w = drafter::drafter_weights_from(
      dcfg, names,
      [&](const std::string& n) {
        for (const auto& [k, t] : st.master)
          if (k == n) return t;
        throw std::invalid_argument(path + ": missing " + n);
      },
      dt, path);
  DraftVocabFile draft;
  if (dcfg.draft_vocab_size > 0) {  // the head rows come from the run's draft_vocab.safetensors, the mapping from both
    draft = load_draft_vocab(run_dir);
    if (!st.draft_ids.defined() || !st.draft_ids.equal(draft.draft_ids))
      throw std::invalid_argument(path + ": its draft vocabulary differs from " + draft_vocab_path(run_dir) +
                                  " (a run directory mixed from two runs?)");
  }
  // Read before anything in out_dir changes: a run without train_config.json leaves an earlier export whole.
  const int64_t num_anchors = drafter::family_of(dcfg.family).export_needs_num_anchors() ? run_num_anchors(run_dir) : 0;
  remove_draft_gguf(out_dir);  // a GGUF of an earlier export must not outlive its weights, --gguf or not
  write_hf_drafter_folder(out_dir, dcfg, w, dt, draft, num_anchors);
  std::fprintf(stderr, "exported %s (step %lld) -> %s\n", path.c_str(), (long long)st.step, out_dir.c_str());
  if (o.gguf) {
    const std::string gguf = convert_to_gguf(out_dir, *converter_target, dt);
    std::fprintf(stderr, "llama.cpp's converter -> %s\n", gguf.c_str());
  }
}

}  // namespace dflash::exporting
