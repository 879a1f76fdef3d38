#include "export_run.h"

#include <cstdio>
#include <filesystem>
#include <stdexcept>

#include "checkpoint.h"
#include "compute_settings.h"
#include "drafter_config.h"
#include "drafter_weights.h"
#include "hf_export.h"

namespace fs = std::filesystem;

namespace dflash::exporting {

using namespace dflash::train;  // a run's checkpoint and draft vocabulary, as training wrote them

void export_run(const std::string& run_dir, const std::string& out_dir, const std::string& dtype) {
  std::string path;
  const TrainState st = load_latest_checkpoint(run_dir, &path);
  const auto dcfg = drafter::load_drafter_config((fs::path(run_dir) / "drafter_config.json").string());
  const at::ScalarType dt = ops::parse_dtype(dtype.empty() ? dcfg.torch_dtype : dtype, "export: --dtype");
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
  write_hf_drafter_folder(out_dir, dcfg, w, dt, draft);
  std::fprintf(stderr, "exported %s (step %lld) -> %s\n", path.c_str(), (long long)st.step, out_dir.c_str());
}

}  // namespace dflash::exporting
