// The one rule for every command that writes an output folder (export, train, dump-hidden, regenerate
// --hidden-out, plot): what an existing folder already holds decides whether the command may write there.
// A folder is reused only for what the command itself keeps there (a run is resumed, an earlier export replaced,
// shards added to); a folder holding a model, a run, a dataset or an export that the command does not keep is
// refused in one line naming the folder, what it holds and the entry that shows it; `export` never writes into
// any other non-empty folder without --force (docs/ERRORS.md, "Output folders"). Torch-free.
#pragma once
#include <string>

namespace dflash::util {

enum class FolderContent {
  Nothing,        // missing or empty
  Run,            // a training run: drafter_config.json, checkpoints/ or metrics.jsonl
  Dataset,        // feature shards (index-*.json, index.json) or samples (*.jsonl, *.jsonl.gz, *.parquet)
  DrafterExport,  // what `dflash export` writes: a config.json with "dflash_config" and only export files
  Model,          // a model: config.json, weights (*.safetensors, *.gguf, *.bin, *.pt, *.pth) or a tokenizer
  Other,          // anything else (notes, plots, unrelated files)
};

struct FolderSurvey {
  FolderContent content = FolderContent::Nothing;
  std::string evidence;  // the entry that shows it ("config.json", "checkpoints/"), empty for Nothing and Other
};

// What the folder at `path` holds, from its own entries (not its subfolders' contents). A path that is not a
// folder holds Nothing here (check_output_folder refuses it).
FolderSurvey survey_folder(const std::string& path);

// "a model", "a training run", ...
const char* folder_content_name(FolderContent c);

// The files an export writes (also what a folder may hold and still count as an earlier export): these, and the
// names add_export_file adds.
inline constexpr const char* kExportFiles[] = {"config.json", "model.safetensors", "draft.gguf"};

// Adds `name` to the files an export writes: each registered drafter family's remote code (drafter::register_family
// adds them, so that re-exporting a run of another family into a folder replaces that export and removes its
// modelling file). At start-up, before any survey; adding a name twice adds nothing.
void add_export_file(const std::string& name);

enum class OutputFolderUse {
  Export,   // `export --out`: an earlier export is replaced; anything else non-empty needs --force, and a
            // model, run or dataset is refused even then
  Run,      // `train` 'out': a run is resumed or restarted; a model, dataset or export is refused
  Dataset,  // `data dump-hidden --out`, `data regenerate --hidden-out`: shards are added; a model, run or export
            // is refused
  Plots,    // `plot --out`: PNGs beside a run, samples or other files; a model or an export is refused
};

// check_output_folder (the path itself), then the rule above. `force` only matters for Export. Throws
// std::invalid_argument "<what>: '<path>' holds <content> (<evidence>); ...".
void check_output_folder_use(const std::string& path, const std::string& what, OutputFolderUse use,
                             bool force = false);

}  // namespace dflash::util
