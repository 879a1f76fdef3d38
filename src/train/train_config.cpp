#include "train_config.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <limits>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <stdexcept>
#include <tuple>
#include <variant>

#include "args.h"
#include "device_list.h"
#include "config_yaml.h"
#include "family_registry.h"
#include "family_train_settings.h"
#include "index_list.h"
#include "input_file.h"
#include "number_range.h"
#include "strict_json.h"

namespace dflash::train {
namespace {

using Member = std::variant<std::string TrainConfig::*, int64_t TrainConfig::*, double TrainConfig::*,
                            bool TrainConfig::*, util::Dtype TrainConfig::*, drafter::CheckpointPolicy TrainConfig::*,
                            drafter::LossDecay TrainConfig::*, ops::AttentionBackend TrainConfig::*,
                            util::ByteSize TrainConfig::*, std::vector<int64_t> TrainConfig::*,
                            data::SampleFormat TrainConfig::*, std::optional<drafter::FamilyRef> TrainConfig::*,
                            ReportTo TrainConfig::*, util::DeviceListSetting TrainConfig::*,
                            util::DeviceGridSetting TrainConfig::*>;
struct Field {
  FieldInfo info;
  Member member;
};

// A setting of the step's shape: its name, kind and help are the run shape's (drafter/run_shape.h), which plan,
// bench step and doctor declare too.
FieldInfo shape_info(const std::string& key) {
  const drafter::RunShapeField& f = drafter::run_shape_field(key);
  return {f.key, f.kind, f.help};
}

const std::vector<Field>& fields() {
  using C = TrainConfig;
  static const std::vector<Field> f = {
      {{"target", "str", "target model: HF folder or .gguf (required)"}, &C::target},
      {{"data", "str", "training samples: file or folder (required)"}, &C::data},
      {{"data_format", "str", "auto | tokens (online) | dflash | specforge (offline)"}, &C::data_format},
      {{"out", "str", "run directory (required)"}, &C::out},
      {{"drafter_config", "str", "drafter config.json (empty: built from the target)"}, &C::drafter_config},
      {{"drafter_layers", "int", "drafter decoder layers (without drafter_config)"}, &C::drafter_layers},
      {{"target_layer_ids", "str", "comma list of target layers (empty: the default, docs/DFLASH.md)"},
       &C::target_layer_ids},
      {{"mask_token_id", "int", "block mask token id (required without drafter_config)"}, &C::mask_token_id},
      {shape_info("block_size"), &C::block_size},
      {{"steps", "int", "optimizer steps (0: from epochs)"}, &C::steps},
      {{"epochs", "int", "epochs when steps is 0"}, &C::epochs},
      {{"batch_size", "int", "sequences per micro-batch"}, &C::batch_size},
      {{"grad_accum", "int", "micro-batches per worker per step"}, &C::grad_accum},
      {shape_info("max_len"), &C::max_len},
      {{"pack", "bool", "pack the micro-batch's samples into rows of max_len tokens (documents kept apart)"}, &C::pack},
      {{"lr", "float", "peak learning rate"}, &C::lr},
      {{"warmup_ratio", "float", "linear warmup fraction"}, &C::warmup_ratio},
      {{"min_lr_ratio", "float", "cosine floor as a fraction of lr"}, &C::min_lr_ratio},
      {{"weight_decay", "float", "AdamW decoupled weight decay"}, &C::weight_decay},
      {{"beta1", "float", "AdamW beta1"}, &C::beta1},
      {{"beta2", "float", "AdamW beta2"}, &C::beta2},
      {{"eps", "float", "AdamW epsilon"}, &C::eps},
      {{"clip", "float", "global gradient-norm clip (0: off)"}, &C::clip},
      {{"seed", "int", "seed: init, data order, anchors"}, &C::seed},
      {shape_info("num_anchors"), &C::num_anchors},
      {{"gamma", "float", "loss decay exp(-(k-1)/gamma) (0: by block size: 7 for B=16; dspark: exp(-j/gamma), 0: 4)"},
       &C::gamma},
      {{"loss_decay", "str", "exp: decay by gamma | none: every block slot weighs 1 (SpecForge's default)"},
       &C::loss_decay},
      {shape_info("kl_weight"), &C::kl_weight},
      {shape_info("dtype"), &C::dtype},
      {{"target_dtype", "str", "online target dtype: fp32 | bf16 | fp16 | fp64"}, &C::target_dtype},
      {shape_info("activation_checkpoint"), &C::activation_checkpoint},
      {shape_info("loss_chunk_rows"), &C::loss_chunk_rows},
      {{"draft_vocab", "int", "draft vocabulary: the K most frequent answer tokens + EOS ids (0: full vocabulary)"},
       &C::draft_vocab},
      {{"drafter_devices", "str", "one worker thread per device, e.g. cpu,cpu"}, &C::drafter_devices},
      {{"target_devices", "str", "online target: stages separated by ',', replicas by ';' (cuda:0,cuda:1;cuda:2,cuda:3)"},
       &C::target_devices},
      {{"dist_backend", "str", "multi-process all-reduce: auto (nccl for CUDA workers, else gloo) | gloo | nccl"},
       &C::dist_backend},
      {{"attention_backend", "str",
        "auto (fused after a self-check against the reference on each worker's device, else reference) | fused | "
        "reference"},
       &C::attention_backend},
      {{"checkpoint_every", "int", "steps between checkpoints"}, &C::checkpoint_every},
      {{"keep_checkpoints", "int", "checkpoints kept"}, &C::keep_checkpoints},
      {{"log_every", "int", "steps between metrics lines"}, &C::log_every},
      {{"threads", "int", "CPU threads per worker and per target thread (0: cores / workers, cores / target threads)"},
       &C::threads},
      {{"budget", "str", "refuse configs whose planned peak exceeds this (e.g. 90GB)"}, &C::budget},
      {{"queue_depth", "int", "prepared steps buffered ahead of the workers"}, &C::queue_depth},
      {{"init_std", "float", "std of initial linear weights"}, &C::init_std},
      {{"init_final_norm", "float", "initial weight of the drafter's final norm (logits scale with it)"},
       &C::init_final_norm},
      {{"init_from_target_layer", "int", "-1: random drafter layers; N: drafter layer i starts as target layer N+i"},
       &C::init_from_target_layer},
      {{"init_from", "str",
        "a drafter model.safetensors to start from (dflash2: a DFlash drafter's too, with identity convs and a no-op "
        "selector added)"},
       &C::init_from},
      {{"stop_after", "int", "stop with a checkpoint after this many steps of this run (0: never)"}, &C::stop_after},
      {{"resume", "bool", "continue from out's latest checkpoint"}, &C::resume},
      {{"deterministic", "bool",
        "reproducible CUDA gradients: torch's deterministic algorithms (the attention's dQ without atomics)"},
       &C::deterministic},
      {{"drafter_family", "str",
        "dflash | dspark | dflash2 (empty: the one drafter_config's architectures names, else dflash)"},
       &C::drafter_family},
      {{"report_to", "str", "experiment trackers fed while training: none | a comma list of tensorboard, wandb, mlflow, "
                            "swanlab"}, &C::report_to},
      {{"report_project", "str", "the trackers' project (MLflow: experiment)"}, &C::report_project},
      {{"report_run_name", "str", "the trackers' run name (empty: the run folder's name)"}, &C::report_run_name},
      {{"tensorboard_dir", "str", "TensorBoard event folder (empty: RUN_DIR/report/tensorboard)"}, &C::tensorboard_dir},
      {{"wandb_mode", "str", "W&B: offline (files only; wandb sync uploads them) | online"}, &C::wandb_mode},
      {{"wandb_dir", "str", "W&B: folder that gets wandb/ (empty: RUN_DIR/report)"}, &C::wandb_dir},
      {{"mlflow_tracking_uri", "str", "MLflow: a folder, file:, sqlite: or http(s): URI (empty: RUN_DIR/report/mlruns)"},
       &C::mlflow_tracking_uri},
      {{"swanlab_mode", "str", "SwanLab: local | offline | online"}, &C::swanlab_mode},
      {{"swanlab_logdir", "str", "SwanLab: log folder (empty: RUN_DIR/report/swanlog)"}, &C::swanlab_logdir},
  };
  return f;
}

std::string flag_name(const std::string& key) {
  std::string s = key;
  for (char& ch : s)
    if (ch == '_') ch = '-';
  return s;
}

void require(bool ok, const std::string& key, const std::string& expected, const std::string& got) {
  if (!ok) throw std::invalid_argument("train config: '" + key + "' must be " + expected + ", got " + got);
}

// A float as written: 1e-09, not to_string's 0.000000.
std::string shown(double v) {
  if (!std::isfinite(v)) return util::number_text(v);
  return nlohmann::json(v).dump();
}

// Integer settings: the range, with its limit named. Limits keep every count far from overflow and from
// allocations no machine has (threads: 1000000 made training hang in the OpenMP pool).
void in_range(const std::string& key, int64_t v, int64_t lo, int64_t hi, const std::string& why = "") {
  require(v >= lo && v <= hi, key, "in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]" + why,
          std::to_string(v));
}

// A setting of the step's shape: the run shape's range (drafter/run_shape.h), the one plan and bench step check.
void shape_in_range(const std::string& key, double v) {
  const drafter::RunShapeField& f = drafter::run_shape_field(key);
  if (f.kind == "int") return in_range(key, int64_t(v), int64_t(f.range.lo), int64_t(f.range.hi), f.note);
  if (const auto e = util::out_of_range(v, f.range, f.note)) require(false, key, *e, shown(v));
}

bool is_shape_key(const std::string& key) {
  for (const drafter::RunShapeField& f : drafter::run_shape_fields())
    if (f.key == key) return true;
  return false;
}

// A setting written as text and read into a type of its own, once, when the file or flag is read. read() returns
// "" or what the setting must be (for "<where>: '<key>' must be <that>, got '<text>'"), with an optional detail.
struct TextError {
  std::string must_be, detail;
};

template <class T>
struct TextKind;

template <>
struct TextKind<util::Dtype> {
  static std::optional<TextError> read(const std::string& s, util::Dtype& out) {
    const auto d = util::dtype_from_name(s);
    if (!d) return TextError{util::kDtypeSpellings, ""};
    out = *d;
    return std::nullopt;
  }
  static std::string write(util::Dtype d) { return util::dtype_name(d); }
};

template <>
struct TextKind<drafter::CheckpointPolicy> {
  static std::optional<TextError> read(const std::string& s, drafter::CheckpointPolicy& out) {
    const auto p = drafter::CheckpointPolicy::from_text(s);
    if (!p) return TextError{drafter::kCheckpointPolicySpellings, ""};
    out = *p;
    return std::nullopt;
  }
  static std::string write(const drafter::CheckpointPolicy& p) { return p.name(); }
};

template <>
struct TextKind<drafter::LossDecay> {
  static std::optional<TextError> read(const std::string& s, drafter::LossDecay& out) {
    const auto d = drafter::loss_decay_from_text(s);
    if (!d) return TextError{"exp or none", ""};
    out = *d;
    return std::nullopt;
  }
  static std::string write(drafter::LossDecay d) { return drafter::loss_decay_name(d); }
};

template <>
struct TextKind<ops::AttentionBackend> {
  static std::optional<TextError> read(const std::string& s, ops::AttentionBackend& out) {
    const auto b = ops::attention_backend_from_text(s);
    if (!b) return TextError{ops::kAttentionBackendSpellings, ""};
    out = *b;
    return std::nullopt;
  }
  static std::string write(ops::AttentionBackend b) { return ops::attention_backend_name(b); }
};

template <>
struct TextKind<data::SampleFormat> {
  static std::optional<TextError> read(const std::string& s, data::SampleFormat& out) {
    const auto f = data::sample_format_from_text(s);
    if (!f) return TextError{data::kSampleFormatSpellings, ""};
    out = *f;
    return std::nullopt;
  }
  static std::string write(data::SampleFormat f) { return data::sample_format_name(f); }
};

// drafter_family: a registered family's name; empty text = unset (the drafter config's, else the default).
template <>
struct TextKind<std::optional<drafter::FamilyRef>> {
  static std::optional<TextError> read(const std::string& s, std::optional<drafter::FamilyRef>& out) {
    if (s.empty()) {
      out.reset();
      return std::nullopt;
    }
    const drafter::Family* f = drafter::find_family(s);
    if (!f) return TextError{drafter::registered_family_names() + " (empty: from drafter_config)", ""};
    out = *f;
    return std::nullopt;
  }
  static std::string write(const std::optional<drafter::FamilyRef>& f) { return f ? f->name() : ""; }
};

template <>
struct TextKind<ReportTo> {
  static std::optional<TextError> read(const std::string& s, ReportTo& out) {
    const auto r = report_to_from_text(s);
    if (!r) return TextError{std::string(kReportToSpellings) + " (each once)", ""};
    out = *r;
    return std::nullopt;
  }
  static std::string write(const ReportTo& r) { return r.text(); }
};

// The device settings: parsed by util/device_list.h's grammar, whose one-line errors name the key (one field of
// each type: drafter_devices, target_devices); apply_json puts the file (or "train config" for flags) before it.
template <>
struct TextKind<util::DeviceListSetting> {
  static std::optional<TextError> read(const std::string& s, util::DeviceListSetting& out) {
    out = util::read_device_list_setting(s, "'drafter_devices'");
    return std::nullopt;
  }
  static std::string write(const util::DeviceListSetting& d) { return d.text; }
};

template <>
struct TextKind<util::DeviceGridSetting> {
  static std::optional<TextError> read(const std::string& s, util::DeviceGridSetting& out) {
    out = util::read_device_grid_setting(s, "'target_devices'");
    return std::nullopt;
  }
  static std::string write(const util::DeviceGridSetting& d) { return d.text; }
};

// budget: empty text = no budget.
template <>
struct TextKind<util::ByteSize> {
  static std::optional<TextError> read(const std::string& s, util::ByteSize& out) {
    if (s.empty()) {
      out = {};
      return std::nullopt;
    }
    try {
      out = util::parse_byte_size(s, "budget");
    } catch (const std::invalid_argument&) {
      return TextError{"a size like 90GB, 80GiB or 512MB, of 1 byte to 1e18 bytes (empty: no budget)", ""};
    }
    return std::nullopt;
  }
  static std::string write(const util::ByteSize& b) { return b.text; }
};

// target_layer_ids: each layer once (a repeated layer would feed the drafter the same features twice).
template <>
struct TextKind<std::vector<int64_t>> {
  static std::optional<TextError> read(const std::string& s, std::vector<int64_t>& out) {
    const util::IndexList l = util::read_index_list(s);
    if (!l.bad_item.empty()) return TextError{"a comma list of layer indices in [0, 2147483647]", ""};
    if (l.repeated >= 0) return TextError{"a list without repeats", " (layer " + std::to_string(l.repeated) + " twice)"};
    out = l.ids;
    return std::nullopt;
  }
  static std::string write(const std::vector<int64_t>& ids) { return util::join_indices(ids); }
};

template <class T>
constexpr bool is_plain = std::is_same_v<T, std::string> || std::is_same_v<T, int64_t> || std::is_same_v<T, double> ||
                          std::is_same_v<T, bool>;

// The text of a setting written as a string, or as a JSON array (lists: [1, 9, 17] or ["cpu", "cpu"]).
std::string text_of(const nlohmann::json& value, const std::string& bad) {
  if (value.is_string()) return value.get<std::string>();
  if (!value.is_array()) throw std::invalid_argument(bad + "a string, got " + io::json_shown(value));
  std::string s;
  bool first = true;  // an empty first item stays an empty entry (["", "cpu"] is ",cpu"), not dropped
  for (const auto& e : value) {
    if (!first) s += ',';
    first = false;
    s += e.is_string() ? e.get<std::string>() : e.dump();
  }
  return s;
}

}  // namespace

const std::vector<FieldInfo>& train_fields() {
  // Made again when a family registers (at start-up, before any setting is read), so callers may keep references.
  static std::mutex m;
  static std::vector<FieldInfo> v;
  static size_t families = size_t(-1);
  const std::lock_guard<std::mutex> lock(m);
  if (families == drafter::registered_families().size()) return v;
  families = drafter::registered_families().size();
  v.clear();
  for (const auto& f : fields()) {
    v.push_back(f.info);
    if (f.info.key != "drafter_family") continue;
    // The families' own settings (drafter/family_train_settings.h) where --help has always listed them.
    for (const drafter::RegisteredTrainSetting& r : drafter::registered_train_settings())
      v.push_back({r.field.key, r.field.kind, r.field.help});
  }
  return v;
}

nlohmann::json TrainConfig::family_setting(const std::string& key) const {
  if (const auto it = family_settings.find(key); it != family_settings.end()) return *it;
  const auto all = drafter::registered_train_settings();
  if (const drafter::RegisteredTrainSetting* r = drafter::find_registered_train_setting(all, key))
    return r->field.default_value;
  throw std::invalid_argument("train config: no registered drafter family has the setting '" + key + "'");
}

void TrainConfig::validate() const {
  require(!target.empty(), "target", "a model path (HF folder or .gguf)", "nothing");
  require(!data.empty(), "data", "a samples file or folder", "nothing");
  require(!out.empty(), "out", "a run directory", "nothing");
  in_range("drafter_layers", drafter_layers, 1, 256);
  in_range("mask_token_id", mask_token_id, -1, 2147483647, " (-1: from the drafter config)");
  shape_in_range("block_size", block_size);
  in_range("steps", steps, 0, 1000000000000);
  if (steps == 0) in_range("epochs", epochs, 1, 1000000, " when steps is 0");
  in_range("batch_size", batch_size, 1, 65536);
  in_range("grad_accum", grad_accum, 1, 65536);
  shape_in_range("max_len", max_len);
  in_range("num_anchors", num_anchors, 1, max_len, " (at most one anchor per position of max_len)");
  // Every float setting has a finite range (util/number_range.h: finite, not subnormal, within the bounds);
  // docs/TRAINING.md "Limits" lists them.
  for (const auto& [key, v, range, note] : std::initializer_list<std::tuple<const char*, double, util::NumberRange, const char*>>{
           {"lr", lr, util::closed(1e-12, 10), ""},
           {"warmup_ratio", warmup_ratio, util::below(0, 1), ""},
           {"min_lr_ratio", min_lr_ratio, util::closed(0, 1), ""},
           {"weight_decay", weight_decay, util::closed(0, 10), ""},
           {"beta1", beta1, util::below(0, 1), ""},
           {"beta2", beta2, util::below(0, 1), ""},
           {"eps", eps, util::closed(1e-30, 1), ""},
           {"clip", clip, util::closed(0, 1e6), " (0: off)"},
           {"gamma", gamma, util::closed(0, 1e4), " (0: by block size)"},
           {"init_std", init_std, util::closed(1e-8, 10), ""},
           {"init_final_norm", init_final_norm, util::closed(1e-6, 1e3), ""}})
    if (const auto e = util::out_of_range(v, range, note)) require(false, key, *e, shown(v));
  require(loss_decay == drafter::LossDecay::Exp || gamma == 0, "gamma", "0 (unset) with loss_decay none (no decay, no gamma)",
          shown(gamma));
  require(dtype != util::Dtype::F16, "dtype", "bf16, fp32 or fp64", "'fp16'");
  shape_in_range("loss_chunk_rows", loss_chunk_rows);
  shape_in_range("kl_weight", kl_weight);
  in_range("draft_vocab", draft_vocab, 0, 16777216, " (0: the full vocabulary; at most the target's vocabulary size)");
  // Both device lists were parsed when read (their spelling and shape); train checks that the devices exist when
  // the run opens (run_context.cpp), doctor --config reports a missing one as a failed row.
  const auto& drafters = drafter_devices.devices;
  for (const auto& replica : target_devices.grid.replicas)
    for (const util::DeviceName& d : replica)
      if (d.cuda && std::find(drafters.begin(), drafters.end(), d) != drafters.end())
        throw std::invalid_argument("train config: " + d.str() + " is in 'target_devices' (" +
                                    util::quoted_device_text(target_devices.text) + ") and in 'drafter_devices' (" +
                                    util::quoted_device_text(drafter_devices.text) +
                                    "); a GPU runs the target or drafter workers, not both");
  in_range("checkpoint_every", checkpoint_every, 1, std::numeric_limits<int64_t>::max());
  in_range("keep_checkpoints", keep_checkpoints, 1, 1000000);
  in_range("log_every", log_every, 1, std::numeric_limits<int64_t>::max());
  in_range("threads", threads, 0, 1024, " (0: cores / workers)");
  in_range("queue_depth", queue_depth, 1, 1024);
  in_range("stop_after", stop_after, 0, std::numeric_limits<int64_t>::max());
  in_range("init_from_target_layer", init_from_target_layer, -1, 2147483647, " (-1: off, else a target layer index)");
  require(init_from.empty() || init_from_target_layer < 0, "init_from",
          "empty with init_from_target_layer set (one starting point)", "'" + init_from + "'");
  require(dist_backend == "auto" || dist_backend == "gloo" || dist_backend == "nccl", "dist_backend",
          "auto, gloo or nccl", "'" + dist_backend + "'");
  validate_report_settings();
  validate_family_settings();
}

void TrainConfig::validate_report_settings() const {
  require(wandb_mode == "offline" || wandb_mode == "online", "wandb_mode", "offline or online", "'" + wandb_mode + "'");
  require(swanlab_mode == "local" || swanlab_mode == "offline" || swanlab_mode == "online", "swanlab_mode",
          "local, offline or online", "'" + swanlab_mode + "'");
}

// Each registered family checks its own settings (their ranges for every run), and one that differs from its default
// is refused unless the family trains: a markov_rank given to a DFlash run would otherwise be dropped without a word.
void TrainConfig::validate_family_settings() const {
  drafter::validate_family_train_settings(to_json(*this), family().get());
}

nlohmann::json to_json(const TrainConfig& c) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& f : fields())
    std::visit(
        [&](auto m) {
          using T = std::remove_cv_t<std::remove_reference_t<decltype(c.*m)>>;
          if constexpr (is_plain<T>) j[f.info.key] = c.*m;
          else j[f.info.key] = TextKind<T>::write(c.*m);
        },
        f.member);
  for (const drafter::RegisteredTrainSetting& r : drafter::registered_train_settings())
    j[r.field.key] = c.family_setting(r.field.key);
  return j;
}

namespace {

// A family's setting (drafter/family_train_settings.h) read from `value` as its kind says, with the core fields' errors.
nlohmann::json family_value(const drafter::TrainSettingField& f, const nlohmann::json& value, const std::string& where,
                            const std::string& bad) {
  if (f.kind == "str") {
    const std::string text = text_of(value, bad);
    if (f.accepts && !f.accepts(text))
      throw std::invalid_argument(where + ": '" + f.key + "' must be " + f.spellings + ", got '" + text + "'");
    return text;
  }
  if (f.kind == "int") {
    if (!value.is_number_integer()) throw std::invalid_argument(bad + "an integer, got " + io::json_shown(value));
    const auto v = io::json_integer_in(value, std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max());
    if (!v) throw std::invalid_argument(bad + "an integer within int64, got " + io::json_shown(value));
    return *v;
  }
  if (f.kind == "float") {
    if (!value.is_number()) throw std::invalid_argument(bad + "a number, got " + io::json_shown(value));
    return value.get<double>();
  }
  if (f.kind != "bool") throw std::logic_error("train setting '" + f.key + "' has the unknown kind '" + f.kind + "'");
  if (!value.is_boolean()) throw std::invalid_argument(bad + "true or false, got " + io::json_shown(value));
  return value.get<bool>();
}

}  // namespace

void apply_json(TrainConfig& c, const nlohmann::json& j, const std::string& where) {
  apply_json(c, j, SettingSource{SettingSource::Kind::File, where});
}

void apply_json(TrainConfig& c, const nlohmann::json& j, const SettingSource& from) {
  const bool flags = from.kind == SettingSource::Kind::Flags;
  const std::string where = flags ? "command line" : from.name;
  if (!j.is_object()) throw std::invalid_argument(where + ": expected a JSON object of settings");
  for (auto it = j.begin(); it != j.end(); ++it) {  // not a structured binding: lambdas below use them (clang 14)
    const std::string& key = it.key();
    const nlohmann::json& value = it.value();
    const Field* f = nullptr;
    for (const auto& x : fields())
      if (x.info.key == key) f = &x;
    const std::string bad = where + ": key '" + key + "' expects ";
    if (!f) {
      const auto family = drafter::registered_train_settings();
      if (const drafter::RegisteredTrainSetting* r = drafter::find_registered_train_setting(family, key)) {
        c.family_settings[key] = family_value(r->field, value, where, bad);
        c.given_from[key] = flags ? "flag --" + flag_name(key) : where;
        continue;
      }
      std::string valid;
      for (const auto& x : train_fields()) valid += (valid.empty() ? "" : ", ") + x.key;
      throw std::invalid_argument(where + ": unknown key '" + key + "' (valid keys: " + valid +
                                  "; see docs/TRAINING.md)");
    }
    std::visit(
        [&](auto m) {
          using T = std::remove_reference_t<decltype(c.*m)>;
          if constexpr (std::is_same_v<T, std::string>) {
            c.*m = text_of(value, bad);
          } else if constexpr (!is_plain<T>) {
            const std::string text = text_of(value, bad);
            std::optional<TextError> e;
            try {
              e = TextKind<T>::read(text, c.*m);
            } catch (const std::invalid_argument& x) {  // a grammar of its own, its error naming the key
              throw std::invalid_argument((flags ? std::string("train config") : where) + ": " + x.what());
            }
            if (e)
              throw std::invalid_argument(where + ": '" + key + "' must be " + e->must_be + ", got '" + text + "'" +
                                          e->detail);
          } else if constexpr (std::is_same_v<T, int64_t>) {
            if (!value.is_number_integer()) throw std::invalid_argument(bad + "an integer, got " + io::json_shown(value));
            // 2^64-1 must not wrap to -1: the value is shown as written.
            const auto v = io::json_integer_in(value, std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max());
            if (!v) throw std::invalid_argument(bad + "an integer within int64, got " + io::json_shown(value));
            c.*m = *v;
          } else if constexpr (std::is_same_v<T, double>) {
            if (!value.is_number()) throw std::invalid_argument(bad + "a number, got " + io::json_shown(value));
            c.*m = value.get<double>();
          } else {
            if (!value.is_boolean()) throw std::invalid_argument(bad + "true or false, got " + io::json_shown(value));
            c.*m = value.get<bool>();
          }
        },
        f->member);
    c.given_from[key] = flags ? "flag --" + flag_name(key) : where;
  }
}

namespace {

std::string read_text(const std::string& path) {
  try {
    return io::read_regular_file(path, 64 << 20);  // a FIFO or a folder is refused at once
  } catch (const std::runtime_error& e) {
    throw std::invalid_argument(std::string(e.what()) + " (the config file)");
  }
}

std::string extension(const std::string& path) {
  const auto slash = path.find_last_of('/'), dot = path.rfind('.');
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash)) return "";
  std::string e = path.substr(dot);
  for (char& ch : e) ch = char(std::tolower(static_cast<unsigned char>(ch)));
  return e;
}

nlohmann::json parse_json_text(const std::string& text, const std::string& path) {
  try {
    return io::parse_json_strict(text);  // a key given twice is an error, as in YAML (not "last one wins")
  } catch (const io::JsonError& e) {
    throw std::invalid_argument(path + ": " + e.what());
  }
}

}  // namespace

nlohmann::json read_config_file(const std::string& path) { return parse_json_text(read_text(path), path); }

bool have_yaml() { return yaml_supported(); }

void apply_config_file(TrainConfig& c, const std::string& path) { apply_config_text(c, read_text(path), path); }

void apply_config_text(TrainConfig& c, const std::string& text, const std::string& path) {
  const std::string ext = extension(path);
  bool yaml = ext == ".yaml" || ext == ".yml";
  if (!yaml && ext != ".json") {  // decide by content: JSON settings are an object
    const auto first = text.find_first_not_of(" \t\r\n");
    yaml = first == std::string::npos || text[first] != '{';
  }
  if (yaml)
    apply_yaml_settings(c, text, path);
  else
    apply_json(c, parse_json_text(text, path), path);
}

bool read_train_args(const std::vector<std::string>& argv, TrainArgs& out) {
  util::Args a("train", "train a DFlash drafter (settings: docs/TRAINING.md)");
  a.option("config", "FILE", "", "JSON or YAML settings file (flags override it)");
  const TrainConfig default_config;
  const nlohmann::json defaults = to_json(default_config);
  const std::vector<FieldInfo> all = train_fields();  // a copy: the registry is read-only by now anyway
  for (const FieldInfo& info : all) {
    // The parser's own default stays empty so that given() tells flags from file values; the help shows it.
    const auto& d = defaults[info.key];
    const std::string shown = d.is_string() ? d.get<std::string>() : d.dump();
    // A switch turns a setting on; one that is on by default takes true|false so that a flag can turn it off.
    const bool on_by_default = info.kind == "bool" && d.get<bool>();
    const bool shape = is_shape_key(info.key);  // the value name other commands show too (drafter/run_shape.h)
    a.option(flag_name(info.key),
             shape            ? drafter::run_shape_field(info.key).value_name
             : on_by_default  ? "true|false"
             : info.kind == "bool" ? ""
             : info.kind == "str"  ? "VALUE"
             : info.kind == "int"  ? "N"
                                     : "X",
             "", info.help + ((info.kind == "bool" && !on_by_default) || shown.empty() ? "" : " [" + shown + "]"));
  }
  if (!a.parse(argv)) return false;
  TrainArgs args;
  args.config_file = a.str("config");
  for (const FieldInfo& info : all) {
    const std::string name = flag_name(info.key);
    if (!a.given(name)) continue;
    if (info.kind == "str") args.flags[info.key] = a.str(name);
    else if (info.kind == "int") args.flags[info.key] = a.i64(name);
    else if (info.kind == "float") args.flags[info.key] = a.f64(name);
    else if (!defaults[info.key].get<bool>()) args.flags[info.key] = true;
    else {
      const std::string v = a.str(name);
      if (v != "true" && v != "false")
        throw util::UsageError("train: --" + name + " must be true or false, got '" + v + "'");
      args.flags[info.key] = v == "true";
    }
  }
  out = args;
  return true;
}

namespace {

// `base`, then the --config file, then the flags; each key given remembers its source (drafter_spec.h names it).
TrainConfig over(TrainConfig base, const TrainArgs& args) {
  if (!args.config_file.empty()) {
    apply_config_file(base, args.config_file);
    for (auto& [key, where] : base.given_from) where = "train config " + where;  // the path, or path:line (YAML)
  }
  apply_json(base, args.flags, SettingSource::flags());
  return base;
}

}  // namespace

TrainConfig train_config_of(const TrainArgs& args) {
  const TrainConfig defaults;
  const TrainConfig given = over(defaults, args);
  if (!given.resume) return given;
  // The run's saved settings, then the --config file and flags given now on top.
  if (given.out.empty()) throw std::invalid_argument("train: --resume needs --out RUN_DIR");
  const std::string saved = (std::filesystem::path(given.out) / "train_config.json").string();
  TrainConfig base;
  const nlohmann::json saved_json = read_config_file(saved);
  apply_json(base, saved_json, saved);
  base.stop_after = 0;  // a pause applies to the invocation that asked for it
  base.given_from.clear();  // what the run saved is not given now
  // ... except the settings that follow the drafter's shape (a family's head rank), the shape of the weights it
  // saved: the default rule for the hidden size (head_rank_default.h) must not rebuild a run that saved another rank
  // (one from before the rule: 256).
  for (const drafter::RegisteredTrainSetting& r : drafter::registered_train_settings())
    if (r.field.follows_drafter_shape && saved_json.contains(r.field.key)) base.given_from[r.field.key] = saved;
  TrainConfig resumed = over(base, args);
  resumed.resume = true;
  return resumed;
}

bool parse_train_args(const std::vector<std::string>& argv, TrainConfig& out) {
  TrainArgs args;
  if (!read_train_args(argv, args)) return false;
  const TrainConfig defaults;
  out = over(defaults, args);
  return true;
}

}  // namespace dflash::train
