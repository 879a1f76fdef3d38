#include "drafter_weights.h"

#include <algorithm>
#include <set>
#include <stdexcept>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include "conv_selector_weight_names.h"
#include "family_model.h"
#include "safetensors.h"

namespace dflash::drafter {

const char* layer_param_suffix(int p) {
  static const char* names[kNumLayerParams] = {
      "input_layernorm.weight",   "self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
      "self_attn.o_proj.weight",  "self_attn.q_norm.weight", "self_attn.k_norm.weight",
      "post_attention_layernorm.weight", "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight"};
  return names[p];
}

namespace {

std::vector<int64_t> layer_param_shape(const DrafterConfig& c, int p) {
  const int64_t H = c.hidden_size, Q = c.num_attention_heads * c.head_dim, K = c.num_key_value_heads * c.head_dim;
  const int64_t I = c.intermediate_size;
  switch (p) {
    case kInputNorm: case kPostNorm: return {H};
    case kQProj: return {Q, H};
    case kKProj: case kVProj: return {K, H};
    case kOProj: return {H, Q};
    case kQNorm: case kKNorm: return {c.head_dim};
    case kGateProj: case kUpProj: return {I, H};
    case kDownProj: return {H, I};
  }
  return {};
}


std::string shape_str(at::IntArrayRef s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

}  // namespace

std::vector<std::pair<std::string, at::Tensor>> DrafterWeights::named() const {
  std::vector<std::pair<std::string, at::Tensor>> out = {{"fc.weight", fc}, {"hidden_norm.weight", hidden_norm},
                                                         {"norm.weight", norm}};
  for (size_t i = 0; i < layers.size(); ++i)
    for (int p = 0; p < kNumLayerParams; ++p)
      out.emplace_back("layers." + std::to_string(i) + "." + layer_param_suffix(p), layers[i][p]);
  for (size_t i = 0; i < convs.size(); ++i) {
    out.emplace_back(conv_base_kernel_name(int64_t(i), ConvSite::Attention), convs[i].attention_conv.base_kernel);
    out.emplace_back(conv_kernel_projection_name(int64_t(i), ConvSite::Attention), convs[i].attention_conv.kernel_projection);
    out.emplace_back(conv_base_kernel_name(int64_t(i), ConvSite::Mlp), convs[i].mlp_conv.base_kernel);
    out.emplace_back(conv_kernel_projection_name(int64_t(i), ConvSite::Mlp), convs[i].mlp_conv.kernel_projection);
  }
  if (selector.hidden_projection.defined()) {
    out.emplace_back(kSelectorHiddenProjection, selector.hidden_projection);
    out.emplace_back(kSelectorPredecessorCodebook, selector.predecessor_codebook);
    out.emplace_back(kSelectorSuccessorCodebook, selector.successor_codebook);
  }
  out.insert(out.end(), heads.begin(), heads.end());
  return out;
}

std::vector<at::Tensor> DrafterWeights::parameters() const {
  std::vector<at::Tensor> out;
  for (auto& [n, t] : named()) out.push_back(t);
  return out;
}

int64_t DrafterWeights::numel() const {
  int64_t n = 0;
  for (auto& t : parameters()) n += t.numel();
  return n;
}

void DrafterWeights::set_requires_grad(bool on) {
  fc.requires_grad_(on);
  hidden_norm.requires_grad_(on);
  norm.requires_grad_(on);
  for (auto& l : layers)
    for (auto& t : l.t) t.requires_grad_(on);
  for (auto& [n, t] : heads) t.requires_grad_(on);
  for (auto& cv : convs)
    for (BlockConvWeights* b : {&cv.attention_conv, &cv.mlp_conv}) {
      b->base_kernel.requires_grad_(on);
      b->kernel_projection.requires_grad_(on);
    }
  for (at::Tensor* t : {&selector.hidden_projection, &selector.predecessor_codebook, &selector.successor_codebook})
    if (t->defined()) t->requires_grad_(on);
}

std::vector<std::pair<std::string, std::vector<int64_t>>> drafter_weight_shapes(const DrafterConfig& c) {
  const int64_t H = c.hidden_size;
  std::vector<std::pair<std::string, std::vector<int64_t>>> out = {
      {"fc.weight", {H, int64_t(c.target_layer_ids.size()) * H}}, {"hidden_norm.weight", {H}}, {"norm.weight", {H}}};
  for (int64_t i = 0; i < c.num_hidden_layers; ++i)
    for (int p = 0; p < kNumLayerParams; ++p)
      out.emplace_back("layers." + std::to_string(i) + "." + layer_param_suffix(p), layer_param_shape(c, p));
  model_of(c).add_weight_shapes(c, out);
  return out;
}


namespace {
// Tensors in drafter_weight_shapes() order (fc, hidden_norm, norm, then each layer's parameters).
DrafterWeights assemble_weights(const DrafterConfig& c, const std::vector<at::Tensor>& made) {
  DrafterWeights w;
  w.fc = made[0];
  w.hidden_norm = made[1];
  w.norm = made[2];
  size_t k = 3;
  w.layers.resize(size_t(c.num_hidden_layers));
  for (auto& l : w.layers)
    for (int p = 0; p < kNumLayerParams; ++p) l.t[size_t(p)] = made[k++];
  k = model_of(c).take_weights(c, made, k, w);
  const auto shapes = drafter_weight_shapes(c);
  for (; k < made.size(); ++k) w.heads.emplace_back(shapes[k].first, made[k]);
  return w;
}
}  // namespace

DrafterWeights init_drafter_weights(const DrafterConfig& c, at::ScalarType dtype, uint64_t seed, double std,
                                    double norm_jitter, double final_norm) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  const auto opts = at::TensorOptions().dtype(at::kDouble);
  std::vector<at::Tensor> made;
  for (auto& [name, shape] : drafter_weight_shapes(c)) {
    const bool bias = name.size() > 5 && name.compare(name.size() - 5, 5, ".bias") == 0;
    if (bias) {
      made.push_back(at::zeros(shape, opts.dtype(dtype)));
      continue;
    }
    const bool norm = shape.size() == 1;
    at::Tensor t = at::normal(0.0, norm ? norm_jitter : std, shape, gen, opts);
    if (norm) t.add_(name == "norm.weight" ? final_norm : 1.0);
    made.push_back(t.to(dtype));
  }
  DrafterWeights w = assemble_weights(c, made);
  model_of(c).finish_init(c, w, dtype);
  return w;
}

DrafterWeights drafter_weights_from(const DrafterConfig& c, const std::vector<std::string>& available,
                                    const std::function<at::Tensor(const std::string&)>& load,
                                    at::ScalarType dtype, const std::string& where) {
  const auto shapes = drafter_weight_shapes(c);
  std::set<std::string> have(available.begin(), available.end());
  std::set<std::string> expected;
  std::vector<at::Tensor> made;
  for (auto& [name, shape] : shapes) {
    expected.insert(name);
    if (!have.count(name))
      throw std::invalid_argument(where + ": tensor '" + name + "' is missing (expected shape " + shape_str(shape) +
                                  " for this config)");
    at::Tensor t = load(name);
    if (t.sizes() != at::IntArrayRef(shape))
      throw std::invalid_argument(where + ": tensor '" + name + "' has shape " + shape_str(t.sizes()) +
                                  ", expected " + shape_str(shape) + " for this config");
    if (!at::isFloatingType(t.scalar_type()))
      throw std::invalid_argument(where + ": tensor '" + name + "' has a non-floating dtype");
    made.push_back(t.to(dtype).contiguous());
  }
  for (auto& n : available)
    if (!expected.count(n))
      throw std::invalid_argument(where + ": unexpected tensor '" + n +
                                  "' (not a DFlash drafter key for this config: wrong file or wrong num_hidden_layers?)");
  return assemble_weights(c, made);
}

DrafterWeights load_drafter_weights(const DrafterConfig& c, const std::string& path, at::ScalarType dtype) {
  const auto file = io::SafetensorsFile::open(path);
  return drafter_weights_from(c, file.names(), [&](const std::string& n) { return file.load(n); }, dtype, path);
}

void save_drafter_weights(const std::string& path, const DrafterWeights& w, at::ScalarType dtype) {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (auto& [n, t] : w.named()) out.emplace_back(n, t.detach().to(dtype).contiguous());
  io::save_safetensors(path, out, {{"format", "pt"}});
}

DrafterWeights load_starting_weights(const DrafterConfig& c, const std::string& path, at::ScalarType dtype,
                                     uint64_t seed, double std) {
  return model_of(c).load_starting_weights(c, path, dtype, seed, std);
}

}  // namespace dflash::drafter
