#include "train_config.h"

#include <algorithm>
#include <cctype>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <variant>

#include "args.h"
#include "config_yaml.h"
#include "dtype_names.h"

namespace dflash::train {
namespace {

using Member = std::variant<std::string TrainConfig::*, int64_t TrainConfig::*, double TrainConfig::*,
                            bool TrainConfig::*>;
struct Field {
  FieldInfo info;
  Member member;
};

const std::vector<Field>& fields() {
  using C = TrainConfig;
  static const std::vector<Field> f = {
      {{"target", "str", "target model: HF folder or .gguf (required)"}, &C::target},
      {{"data", "str", "training samples: file or folder (required)"}, &C::data},
      {{"data_format", "str", "auto | tokens (online) | dflash | specforge (offline)"}, &C::data_format},
      {{"out", "str", "run directory (required)"}, &C::out},
      {{"drafter_config", "str", "drafter config.json (empty: built from the target)"}, &C::drafter_config},
      {{"drafter_layers", "int", "drafter decoder layers (without drafter_config)"}, &C::drafter_layers},
      {{"target_layer_ids", "str", "comma list of target layers (empty: SPEC default)"}, &C::target_layer_ids},
      {{"mask_token_id", "int", "block mask token id (required without drafter_config)"}, &C::mask_token_id},
      {{"block_size", "int", "block size B (without drafter_config)"}, &C::block_size},
      {{"steps", "int", "optimizer steps (0: from epochs)"}, &C::steps},
      {{"epochs", "int", "epochs when steps is 0"}, &C::epochs},
      {{"batch_size", "int", "sequences per micro-batch"}, &C::batch_size},
      {{"grad_accum", "int", "micro-batches per worker per step"}, &C::grad_accum},
      {{"max_len", "int", "truncate sequences to this many tokens"}, &C::max_len},
      {{"lr", "float", "peak learning rate"}, &C::lr},
      {{"warmup_ratio", "float", "linear warmup fraction"}, &C::warmup_ratio},
      {{"min_lr_ratio", "float", "cosine floor as a fraction of lr"}, &C::min_lr_ratio},
      {{"weight_decay", "float", "AdamW decoupled weight decay"}, &C::weight_decay},
      {{"beta1", "float", "AdamW beta1"}, &C::beta1},
      {{"beta2", "float", "AdamW beta2"}, &C::beta2},
      {{"eps", "float", "AdamW epsilon"}, &C::eps},
      {{"clip", "float", "global gradient-norm clip (0: off)"}, &C::clip},
      {{"seed", "int", "seed: init, data order, anchors"}, &C::seed},
      {{"num_anchors", "int", "anchors per sequence"}, &C::num_anchors},
      {{"gamma", "float", "loss decay (0: by block size)"}, &C::gamma},
      {{"kl_weight", "float", "soft-label weight"}, &C::kl_weight},
      {{"dtype", "str", "drafter compute dtype: bf16 | fp32 | fp64"}, &C::dtype},
      {{"target_dtype", "str", "online target dtype: fp32 | bf16 | fp16 | fp64"}, &C::target_dtype},
      {{"activation_checkpoint", "str", "none | layer | every:K"}, &C::activation_checkpoint},
      {{"loss_chunk_rows", "int", "rows of logits per loss chunk"}, &C::loss_chunk_rows},
      {{"drafter_devices", "str", "one worker thread per device, e.g. cpu,cpu"}, &C::drafter_devices},
      {{"target_devices", "str", "online target pipeline devices"}, &C::target_devices},
      {{"dist_backend", "str", "multi-process all-reduce: auto (nccl for CUDA workers, else gloo) | gloo | nccl"},
       &C::dist_backend},
      {{"checkpoint_every", "int", "steps between checkpoints"}, &C::checkpoint_every},
      {{"keep_checkpoints", "int", "checkpoints kept"}, &C::keep_checkpoints},
      {{"log_every", "int", "steps between metrics lines"}, &C::log_every},
      {{"threads", "int", "CPU threads per worker (0: cores / workers)"}, &C::threads},
      {{"budget", "str", "refuse configs whose planned peak exceeds this (e.g. 90GB)"}, &C::budget},
      {{"queue_depth", "int", "prepared steps buffered ahead of the workers"}, &C::queue_depth},
      {{"init_std", "float", "std of initial linear weights"}, &C::init_std},
      {{"init_final_norm", "float", "initial weight of the drafter's final norm (logits scale with it)"},
       &C::init_final_norm},
      {{"init_from_target_layer", "int", "-1: random drafter layers; N: drafter layer i starts as target layer N+i"},
       &C::init_from_target_layer},
      {{"stop_after", "int", "stop with a checkpoint after this many steps of this run (0: never)"}, &C::stop_after},
      {{"resume", "bool", "continue from out's latest checkpoint"}, &C::resume},
  };
  return f;
}

std::string flag_name(const std::string& key) {
  std::string s = key;
  for (char& ch : s)
    if (ch == '_') ch = '-';
  return s;
}

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

void require(bool ok, const std::string& key, const std::string& expected, const std::string& got) {
  if (!ok) throw std::invalid_argument("train config: '" + key + "' must be " + expected + ", got " + got);
}

}  // namespace

const std::vector<FieldInfo>& train_fields() {
  static const std::vector<FieldInfo> out = [] {
    std::vector<FieldInfo> v;
    for (const auto& f : fields()) v.push_back(f.info);
    return v;
  }();
  return out;
}

std::vector<std::string> TrainConfig::drafter_device_list() const { return split_list(drafter_devices); }
std::vector<std::string> TrainConfig::target_device_list() const { return split_list(target_devices); }

void TrainConfig::validate() const {
  require(!target.empty(), "target", "a model path (HF folder or .gguf)", "nothing");
  require(!data.empty(), "data", "a samples file or folder", "nothing");
  require(!out.empty(), "out", "a run directory", "nothing");
  const std::string fmts[] = {"auto", "tokens", "dflash", "specforge"};
  require(std::find(std::begin(fmts), std::end(fmts), data_format) != std::end(fmts), "data_format",
          "auto, tokens, dflash or specforge", "'" + data_format + "'");
  require(drafter_layers >= 1, "drafter_layers", ">= 1", std::to_string(drafter_layers));
  require(block_size >= 2, "block_size", ">= 2", std::to_string(block_size));
  require(steps >= 0, "steps", ">= 0", std::to_string(steps));
  require(steps > 0 || epochs >= 1, "epochs", ">= 1 when steps is 0", std::to_string(epochs));
  require(batch_size >= 1, "batch_size", ">= 1", std::to_string(batch_size));
  require(grad_accum >= 1, "grad_accum", ">= 1", std::to_string(grad_accum));
  require(max_len >= 2, "max_len", ">= 2", std::to_string(max_len));
  require(lr > 0, "lr", "> 0", std::to_string(lr));
  require(warmup_ratio >= 0 && warmup_ratio < 1, "warmup_ratio", "in [0, 1)", std::to_string(warmup_ratio));
  require(min_lr_ratio >= 0 && min_lr_ratio <= 1, "min_lr_ratio", "in [0, 1]", std::to_string(min_lr_ratio));
  require(weight_decay >= 0, "weight_decay", ">= 0", std::to_string(weight_decay));
  require(beta1 >= 0 && beta1 < 1, "beta1", "in [0, 1)", std::to_string(beta1));
  require(beta2 >= 0 && beta2 < 1, "beta2", "in [0, 1)", std::to_string(beta2));
  require(eps > 0, "eps", "> 0", std::to_string(eps));
  require(clip >= 0, "clip", ">= 0", std::to_string(clip));
  require(num_anchors >= 1, "num_anchors", ">= 1", std::to_string(num_anchors));
  require(gamma >= 0, "gamma", ">= 0", std::to_string(gamma));
  require(kl_weight >= 0 && kl_weight <= 1, "kl_weight", "in [0, 1]", std::to_string(kl_weight));
  util::canonical_dtype(target_dtype, "train config: 'target_dtype'");
  require(util::canonical_dtype(dtype, "train config: 'dtype'") != "fp16", "dtype", "bf16, fp32 or fp64", "'fp16'");
  require(loss_chunk_rows >= 1, "loss_chunk_rows", ">= 1", std::to_string(loss_chunk_rows));
  require(!drafter_device_list().empty(), "drafter_devices", "a comma list of devices (cpu, cuda:N)", "nothing");
  require(!target_device_list().empty(), "target_devices", "a comma list of devices (cpu, cuda:N)", "nothing");
  require(checkpoint_every >= 1, "checkpoint_every", ">= 1", std::to_string(checkpoint_every));
  require(keep_checkpoints >= 1, "keep_checkpoints", ">= 1", std::to_string(keep_checkpoints));
  require(log_every >= 1, "log_every", ">= 1", std::to_string(log_every));
  require(threads >= 0, "threads", ">= 0", std::to_string(threads));
  require(queue_depth >= 1, "queue_depth", ">= 1", std::to_string(queue_depth));
  require(stop_after >= 0, "stop_after", ">= 0", std::to_string(stop_after));
  require(init_std > 0, "init_std", "> 0", std::to_string(init_std));
  require(init_final_norm > 0, "init_final_norm", "> 0", std::to_string(init_final_norm));
  require(init_from_target_layer >= -1, "init_from_target_layer", "-1 (off) or a target layer index",
          std::to_string(init_from_target_layer));
  require(dist_backend == "auto" || dist_backend == "gloo" || dist_backend == "nccl", "dist_backend",
          "auto, gloo or nccl", "'" + dist_backend + "'");
}

nlohmann::json to_json(const TrainConfig& c) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& f : fields())
    std::visit([&](auto m) { j[f.info.key] = c.*m; }, f.member);
  return j;
}

void apply_json(TrainConfig& c, const nlohmann::json& j, const std::string& where) {
  if (!j.is_object()) throw std::invalid_argument(where + ": expected a JSON object of settings");
  for (const auto& [key, value] : j.items()) {
    const Field* f = nullptr;
    for (const auto& x : fields())
      if (x.info.key == key) f = &x;
    if (!f) {
      std::string valid;
      for (const auto& x : fields()) valid += (valid.empty() ? "" : ", ") + x.info.key;
      throw std::invalid_argument(where + ": unknown key '" + key + "' (valid keys: " + valid +
                                  "; see docs/TRAINING.md)");
    }
    const std::string bad = where + ": key '" + key + "' expects ";
    std::visit(
        [&](auto m) {
          using T = std::remove_reference_t<decltype(c.*m)>;
          if constexpr (std::is_same_v<T, std::string>) {
            if (value.is_array()) {  // lists may be written as JSON arrays: [1, 9, 17] or ["cpu", "cpu"]
              std::string s;
              for (const auto& e : value) s += (s.empty() ? "" : ",") + (e.is_string() ? e.get<std::string>() : e.dump());
              c.*m = s;
            } else if (value.is_string()) {
              c.*m = value.get<std::string>();
            } else {
              throw std::invalid_argument(bad + "a string, got " + value.dump());
            }
          } else if constexpr (std::is_same_v<T, int64_t>) {
            if (!value.is_number_integer()) throw std::invalid_argument(bad + "an integer, got " + value.dump());
            c.*m = value.get<int64_t>();
          } else if constexpr (std::is_same_v<T, double>) {
            if (!value.is_number()) throw std::invalid_argument(bad + "a number, got " + value.dump());
            c.*m = value.get<double>();
          } else {
            if (!value.is_boolean()) throw std::invalid_argument(bad + "true or false, got " + value.dump());
            c.*m = value.get<bool>();
          }
        },
        f->member);
  }
}

namespace {

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::invalid_argument(path + ": cannot read the config file");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
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
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    throw std::invalid_argument(path + ": invalid JSON: " + e.what());
  }
}

}  // namespace

nlohmann::json read_config_file(const std::string& path) { return parse_json_text(read_text(path), path); }

bool have_yaml() { return yaml_supported(); }

void apply_config_file(TrainConfig& c, const std::string& path) {
  const std::string text = read_text(path), ext = extension(path);
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

bool parse_train_args(const std::vector<std::string>& argv, TrainConfig& out, nlohmann::json* flag_values) {
  util::Args a("train", "train a DFlash drafter (settings: docs/TRAINING.md)");
  a.option("config", "FILE", "", "JSON or YAML settings file (flags override it)");
  const nlohmann::json defaults = to_json(TrainConfig{});
  for (const auto& f : fields()) {
    // The parser's own default stays empty so that given() tells flags from file values; the help shows it.
    const auto& d = defaults[f.info.key];
    const std::string shown = d.is_string() ? d.get<std::string>() : d.dump();
    a.option(flag_name(f.info.key), f.info.kind == "bool" ? "" : f.info.kind == "str" ? "VALUE" : f.info.kind == "int" ? "N" : "X",
             "", f.info.help + (f.info.kind == "bool" || shown.empty() ? "" : " [" + shown + "]"));
  }
  if (!a.parse(argv)) return false;
  TrainConfig c;
  if (a.given("config")) apply_config_file(c, a.str("config"));
  nlohmann::json flags = nlohmann::json::object();
  for (const auto& f : fields()) {
    const std::string name = flag_name(f.info.key);
    if (!a.given(name)) continue;
    if (f.info.kind == "str") flags[f.info.key] = a.str(name);
    else if (f.info.kind == "int") flags[f.info.key] = a.i64(name);
    else if (f.info.kind == "float") flags[f.info.key] = a.f64(name);
    else flags[f.info.key] = true;
  }
  apply_json(c, flags, "command line");
  out = c;
  if (flag_values) *flag_values = flags;
  return true;
}

}  // namespace dflash::train
