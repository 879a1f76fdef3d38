#include "hf_export.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

#include "atomic_file.h"
#include "family_registry.h"
#include "output_folder.h"
#include "safetensors.h"

namespace dflash::exporting {

using namespace dflash::train;  // a run's checkpoint and draft vocabulary, as training wrote them
namespace fs = std::filesystem;
namespace {

std::string dtype_name(at::ScalarType dt) {
  switch (dt) {
    case at::kBFloat16: return "bfloat16";
    case at::kHalf: return "float16";
    case at::kDouble: return "float64";
    default: return "float32";
  }
}

}  // namespace

nlohmann::json hf_drafter_config_json(const drafter::DrafterConfig& c, at::ScalarType dtype, int64_t num_anchors) {
  nlohmann::json j = drafter::drafter_config_to_json(c);
  // z-lab, SGLang and vLLM take a top-level is_causal for every layer; without it their sliding_attention layers
  // are causal and full ones are not, which is what training does (a sliding layer's block slot j sees slots <= j,
  // a full layer's the whole block: kernels/anchor_mask.h). So is_causal false is written only when every layer is
  // full attention.
  bool any_sliding = false;
  for (const auto& t : c.layer_types) any_sliding |= t == "sliding_attention";
  if (any_sliding) j.erase("is_causal");
  // The family's model class asserts config.num_anchors (family.h): the run's.
  if (const drafter::Family& family = drafter::family_of(c.family); family.export_needs_num_anchors()) {
    if (num_anchors <= 0)
      throw std::invalid_argument(std::string("export: a ") + family.display_name() + " export needs the run's "
                                  "num_anchors (" + family.architecture() + " requires config.num_anchors)");
    j["num_anchors"] = num_anchors;
  }
  j.erase("torch_dtype");  // transformers 5 reads `dtype`
  j["dtype"] = dtype_name(dtype);
  // Engines size the drafter's RoPE table from it (vLLM, SGLang): the target's context length, never a default.
  if (c.max_position_embeddings <= 0)
    throw std::invalid_argument("export: max_position_embeddings is unknown (the target's context length); give it "
                                "with --max-position-embeddings N");
  j["max_position_embeddings"] = c.max_position_embeddings;
  // Both places, equal: llama.cpp's converter and SpecForge read the top level only, z-lab and SGLang dflash_config
  // first (docs/SERVING.md).
  j["dflash_config"]["block_size"] = c.block_size;
  // Every family's remote code; the engines load DSpark (DeepSpec's Qwen3DSparkModel) and DFlash2 (z-lab's
  // DFlash2DraftModel, its settings in dflash_config, written by drafter_config_to_json) by `architectures`, and
  // read no auto_map.
  j["auto_map"] = {{"AutoModel", hf_remote_code_class(c.family)}};
  return j;
}

void write_hf_drafter_folder(const std::string& out_dir, const drafter::DrafterConfig& c,
                             const drafter::DrafterWeights& w, at::ScalarType dtype, const train::DraftVocabFile& draft,
                             int64_t num_anchors) {
  c.validate("drafter config to export to " + out_dir);
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  for (auto& [n, t] : w.named()) tensors.emplace_back(n, t.detach().to(at::kCPU, dtype).contiguous());
  if (c.draft_vocab_size > 0) {
    if (!draft.draft_ids.defined() || draft.draft_ids.size(0) != c.draft_vocab_size || !draft.lm_head.defined() ||
        draft.lm_head.sizes() != at::IntArrayRef({c.draft_vocab_size, c.hidden_size}))
      throw std::invalid_argument("export: draft_vocab_size " + std::to_string(c.draft_vocab_size) +
                                  " needs draft_ids [K] and lm_head [K, hidden_size]");
    // vLLM (vllm/model_executor/models/qwen3_dflash.py and llama_eagle3.py, DFlashQwen3ForCausalLM /
    // Eagle3LlamaForCausalLM.load_weights + compute_logits) reads `d2t` as int64 offsets [draft_vocab_size]:
    // target = arange(K) + d2t, skips `t2d`, and loads `lm_head.weight` [draft_vocab_size, H] from the draft
    // when present. SpecForge writes t2d as bool [target vocab]; we write both.
    tensors.emplace_back("lm_head.weight", draft.lm_head.to(at::kCPU, dtype).contiguous());
    tensors.emplace_back("d2t", draft_to_target_offsets(draft.draft_ids.to(at::kCPU, at::kLong)).contiguous());
    tensors.emplace_back("t2d", target_in_draft_mask(draft.draft_ids, c.vocab_size));
  }
  fs::path out = fs::path(out_dir).lexically_normal();
  if (!out.has_filename() && out.has_parent_path()) out = out.parent_path();  // "d/": the folder d
  if (fs::exists(out) && !fs::is_directory(out)) throw std::invalid_argument(out_dir + ": exists and is not a folder");
  const fs::path parent = out.has_parent_path() ? out.parent_path() : fs::path(".");
  fs::create_directories(parent);
  // Everything is written into a hidden folder beside the output first, so a failure (a full disk, an
  // interrupted run) leaves neither an empty nor a partial export behind.
  // (Appended piecewise: GCC 12 warns, a false positive of -Wrestrict, on `"." + std::string` inlined here.)
  std::string stage_name = ".";
  (stage_name += out.filename().string()) += ".tmp-";
  stage_name += std::to_string(::getpid());
  const fs::path stage = parent / stage_name;
  // config.json last: it completes a folder. Every modelling file of every family is listed, so that replacing an
  // export of another family removes the files this one does not write.
  const std::vector<RemoteCodeFile> code = hf_remote_code_files(c.family);
  std::vector<const char*> files = {"model.safetensors"};
  for (const drafter::Family* f : drafter::registered_families())
    for (const char* name : f->remote_code_files())
      if (std::none_of(files.begin(), files.end(), [&](const char* g) { return std::string(g) == name; }))
        files.push_back(name);
  files.push_back("config.json");
  auto clean_stage = [&] {
    std::error_code ec;
    for (const char* f : files) fs::remove(stage / f, ec);
    fs::remove(stage, ec);
  };
  clean_stage();
  try {
    fs::create_directory(stage);
    io::save_safetensors((stage / files[0]).string(), tensors, {{"format", "pt"}});
    for (const RemoteCodeFile& f : code) data::write_file_atomic((stage / f.name).string(), f.text);
    data::write_file_atomic((stage / "config.json").string(), hf_drafter_config_json(c, dtype, num_anchors).dump(2) + "\n");
    if (!fs::exists(out)) {
      fs::rename(stage, out);  // the whole folder appears at once
    } else {  // into an existing folder: file by file, each rename atomic, the config last
      // Another family's modelling file goes only from an earlier export; a folder written with --force keeps
      // every file the export does not write.
      const bool earlier_export = util::survey_folder(out.string()).content == util::FolderContent::DrafterExport;
      for (const char* f : files)
        if (fs::exists(stage / f)) fs::rename(stage / f, out / f);
        else if (earlier_export) fs::remove(out / f);
      fs::remove(stage);
    }
    data::fsync_dir(out.string());
    data::fsync_dir(parent.string());
  } catch (...) {
    clean_stage();
    throw;
  }
}

}  // namespace dflash::exporting
