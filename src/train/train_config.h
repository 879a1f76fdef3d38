// `dflash train` settings: one table of fields (name, kind, default, help) read from a JSON or YAML file and
// from flags (--num-anchors for num_anchors); flags override the file; unknown keys and flags are errors.
// Every setting is parsed once, when it is read, into the type the run uses (a dtype, a checkpoint policy, a
// list of layer ids, a size in bytes, ...); validate() then checks ranges and combinations. Defaults follow
// docs/DFLASH.md (AdamW wd 0, lr 6e-4, cosine with 4% warmup, clip 1.0, 512 anchors, B=16). Torch-free.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "attention_backend.h"
#include "byte_size.h"
#include "checkpoint_policy.h"
#include "device_list.h"
#include "dtype_names.h"
#include "family_ref.h"
#include "loss_weighting.h"
#include "report_to.h"
#include "run_shape.h"
#include "sample_format.h"

namespace dflash::train {

struct TrainConfig {
  std::string target, data, out;
  data::SampleFormat data_format = data::SampleFormat::Auto;
  std::string drafter_config;
  int64_t drafter_layers = 1;
  std::vector<int64_t> target_layer_ids;  // empty = the default for (target layers, drafter layers)
  int64_t mask_token_id = -1, block_size = drafter::RunShape{}.block_size;
  int64_t steps = 0, epochs = 6, batch_size = 1, grad_accum = 1, max_len = drafter::RunShape{}.max_len;
  bool pack = false;  // several samples per row of max_len tokens (sequence_packing.h)
  double lr = 6e-4, warmup_ratio = 0.04, min_lr_ratio = 0.0, weight_decay = 0.0;
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8, clip = 1.0;
  int64_t seed = 0, num_anchors = drafter::RunShape{}.num_anchors;
  double gamma = 0.0, kl_weight = drafter::RunShape{}.kl_weight;
  drafter::LossDecay loss_decay = drafter::LossDecay::Exp;  // exp: w_k = exp(-(k-1)/gamma); none: every slot 1
  util::Dtype dtype = drafter::RunShape{}.dtype, target_dtype = util::Dtype::F32;
  drafter::CheckpointPolicy activation_checkpoint = drafter::RunShape{}.activation_checkpoint;
  int64_t loss_chunk_rows = drafter::RunShape{}.loss_chunk_rows;
  int64_t draft_vocab = 0;  // K > 0: LM head restricted to the K most frequent answer tokens (+ EOS ids)
  // Parsed once when read (util/device_list.h), each with its text as written: drafter_devices one worker per
  // device, in order; target_devices replicas (';') of pipeline stages (',').
  util::DeviceListSetting drafter_devices = util::read_device_list_setting("cpu", "drafter_devices");
  util::DeviceGridSetting target_devices = util::read_device_grid_setting("cpu", "target_devices");
  int64_t checkpoint_every = 100, keep_checkpoints = 2, log_every = 10, threads = 0;
  util::ByteSize budget;  // unset: no budget
  int64_t queue_depth = 2;
  double init_std = 0.02;
  double init_final_norm = 1.0;
  int64_t init_from_target_layer = -1;  // >= 0: drafter layer i starts as a copy of target layer N + i
  std::string init_from;  // a drafter model.safetensors to start from (dflash2: a DFlash drafter's works too)
  std::string dist_backend = "auto";  // auto | gloo | nccl (multi-process gradient all-reduce)
  ops::AttentionBackend attention_backend = ops::AttentionBackend::Auto;  // docs/TRAINING.md "Attention backend"
  int64_t stop_after = 0;  // stop (checkpoint, exit 0) after this many steps of this invocation; 0 = never
  bool resume = false;
  // The keys this invocation's settings file and flags set (apply_json), whatever their value, each with its source
  // ("train config t.yaml:3", "flag --block-size"): a value given equal to the default still counts as given, so it
  // can conflict with a drafter config (drafter_spec.h). Not a setting: never written to train_config.json, and a
  // resumed run's saved settings do not count.
  std::map<std::string, std::string> given_from;
  bool was_given(const std::string& key) const { return given_from.count(key) > 0; }
  bool deterministic = false;  // torch's deterministic algorithms: reproducible CUDA gradients (TRAINING.md)
  // The drafter family, a registered one (drafter/family_ref.h). Unset: the one drafter_config's architectures
  // names, else the default (dflash); resolve_drafter_family() settles it before a run, and the run's
  // train_config.json keeps it.
  std::optional<drafter::FamilyRef> drafter_family;
  // The registered families' own settings (drafter/family_train_settings.h: DSpark's heads and loss weights,
  // DFlash2's convs and selector, a plug-in family's), key -> value as train_config.json writes them: only those set
  // (by a file, a flag, a saved run); family_setting() gives the family's default for the others. Each family checks
  // its own (validate_family_settings) and reads them from to_json's keys, so TrainConfig names none of them.
  nlohmann::json family_settings = nlohmann::json::object();
  // A family setting's value, else its registered default; std::invalid_argument for a key no family declares.
  nlohmann::json family_setting(const std::string& key) const;

  // Experiment trackers fed while the run trains (report_to.h; python/dflash/report): the project and run names
  // they file it under (run name "": the run folder's name) and each tracker's own local/offline setting. The
  // folders default ("") to RUN_DIR/report/<tracker>.
  ReportTo report_to;
  std::string report_project = "dflash", report_run_name;
  std::string tensorboard_dir;
  std::string wandb_mode = "offline", wandb_dir;
  std::string mlflow_tracking_uri;
  std::string swanlab_mode = "local", swanlab_logdir;

  // The step's shape (drafter/run_shape.h: the settings plan, bench step and doctor share with train).
  drafter::RunShape run_shape() const {
    return {max_len, num_anchors, block_size, loss_chunk_rows, kl_weight, dtype, activation_checkpoint};
  }
  drafter::FamilyRef family() const { return drafter_family.value_or(drafter::FamilyRef{}); }

  // Throws std::invalid_argument naming the key and the expected value.
  void validate() const;
  void validate_family_settings() const;  // the families' own settings (part of validate())
  void validate_report_settings() const;  // report_to's trackers' modes (part of validate(); `dflash report` too)
};

// Field metadata, in documentation order (also drives the flag parser's help).
struct FieldInfo {
  std::string key;    // snake_case JSON key; the flag is --key with '_' -> '-'
  std::string kind;   // how it is written: "str" (text, parsed into the field's type), "int", "float", "bool"
  std::string help;
};
// The core fields, with every registered family's settings after drafter_family (families in registration order);
// made again when a family registers.
const std::vector<FieldInfo>& train_fields();

// Each field as it is written (typed fields in their canonical spelling), so a saved config reads back the same.
nlohmann::json to_json(const TrainConfig& c);
// Sets the fields present in `j` on `c`, parsing each into its type; `where` names the source (a file) in errors:
// "<where>: key 'lr' expects a number, got ..." for a JSON type, "<where>: 'dtype' must be bf16, fp32 or fp64, got
// 'x'" for a value of the wrong spelling; each key set is recorded as given by `where` (c.given_from).
void apply_json(TrainConfig& c, const nlohmann::json& j, const std::string& where);
// Where a set of settings comes from, by kind rather than by its text: a settings file (`name`: its path, or
// path:line) or the command line's flags, whose errors say "command line" (a value's own grammar: "train config")
// and whose keys are recorded as given by "flag --key".
struct SettingSource {
  enum class Kind { File, Flags };
  Kind kind = Kind::File;
  std::string name;  // the file ("" for flags)
  static SettingSource flags() { return {Kind::Flags, ""}; }
};
void apply_json(TrainConfig& c, const nlohmann::json& j, const SettingSource& from);
// Reads a JSON config file (YAML files are read by apply_config_file).
nlohmann::json read_config_file(const std::string& path);
// Sets the fields of a JSON or YAML settings file on `c`: .json is JSON, .yaml/.yml is YAML, any other name
// is JSON when its first non-blank character is '{', else YAML. YAML scalars are read as the field's kind
// (so `target_layer_ids: 5` and `out: 2024` are strings); errors name the file, line, key and expectation.
// A file that is not a regular file (a FIFO, a folder), a key given twice (JSON or YAML) and a second YAML
// document are errors.
void apply_config_file(TrainConfig& c, const std::string& path);
// The same on the file's text (`path` names it in errors and its extension picks the format).
void apply_config_text(TrainConfig& c, const std::string& text, const std::string& path);
// Whether this build reads YAML (libyaml-cpp-dev found at configure time).
bool have_yaml();

// What `dflash train`'s command line says: the settings file and the flags given, each read once.
struct TrainArgs {
  std::string config_file;  // --config ("" when none)
  nlohmann::json flags = nlohmann::json::object();  // the keys set by flags, as apply_json takes them
};
// Reads `dflash train` argv once; false for --help (printed).
bool read_train_args(const std::vector<std::string>& argv, TrainArgs& out);
// The run's settings: the --config file, then the flags over it. With `resume` set (by either), the run's saved
// settings (out/train_config.json) come first and the file and flags given now override them; `stop_after` is not
// carried over (a pause applies to the invocation that asked for it).
TrainConfig train_config_of(const TrainArgs& args);
// read_train_args, then the file and the flags over the defaults (no saved settings): for tools and tests.
bool parse_train_args(const std::vector<std::string>& argv, TrainConfig& out);

}  // namespace dflash::train
