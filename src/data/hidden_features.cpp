#include "hidden_features.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <filesystem>
#include <stdexcept>

#include "drafter_config.h"
#include "serving_engines.h"

namespace fs = std::filesystem;

namespace dflash::data {

std::vector<int64_t> feature_layer_ids(const std::string& flag, int64_t drafter_layers, const models::TargetConfig& cfg) {
  if (drafter_layers < 1) throw std::invalid_argument("--drafter-layers must be >= 1");
  const std::vector<int64_t> ids = flag.empty() ? drafter::default_target_layer_ids(cfg.num_hidden_layers, drafter_layers)
                                                : parse_layer_ids(flag, "--target-layer-ids");
  for (auto id : ids)
    if (id < 0 || id >= cfg.num_hidden_layers)
      throw std::invalid_argument("--target-layer-ids: layer " + std::to_string(id) + " is outside the target's " +
                                  std::to_string(cfg.num_hidden_layers) + " layers");
  drafter::check_capturable_layer_ids(ids, cfg.num_hidden_layers, "--target-layer-ids");
  return ids;
}

HiddenMeta feature_meta(const std::string& target_path, const models::TargetConfig& cfg,
                        const std::vector<int64_t>& layer_ids) {
  HiddenMeta meta;
  meta.target_layer_ids = layer_ids;
  meta.hidden_size = cfg.hidden_size;
  meta.target_num_layers = cfg.num_hidden_layers;
  fs::path name = fs::absolute(target_path).lexically_normal();
  if (name.filename().empty()) name = name.parent_path();  // "folder/" names the folder
  meta.target = name.filename().string() + " (" + models::target_arch_name(cfg.arch) + ", " +
                std::to_string(cfg.num_hidden_layers) + " layers, hidden " + std::to_string(cfg.hidden_size) +
                ", vocab " + std::to_string(cfg.vocab_size) + ")";
  return meta;
}

at::Tensor sample_features(const models::TargetModel& model, const std::vector<int64_t>& ids,
                           const std::vector<int>& layers, at::Tensor* last_hidden) {
  at::NoGradGuard no_grad;
  return features_of(model.forward(at::tensor(ids, at::kLong).unsqueeze(0), nullptr, layers, false, last_hidden != nullptr),
                     layers, last_hidden);
}

at::Tensor features_of(const models::TargetOutput& o, const std::vector<int>& layers, at::Tensor* last_hidden) {
  std::vector<at::Tensor> parts;
  for (int id : layers) parts.push_back(o.hidden.at(id)[0].to(at::kCPU));
  if (last_hidden) *last_hidden = o.last_hidden[0].to(at::kCPU);
  return at::cat(parts, -1);
}

}  // namespace dflash::data
