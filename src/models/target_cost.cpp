#include "target_cost.h"

#include <algorithm>
#include <cstdio>
#include <stdexcept>

namespace dflash::models {
namespace {

constexpr int64_t kDeltaNetChunk = 64;  // gated_deltanet.cpp's chunk for prefill

struct LayerShape {
  double H, I, D, Hq, Hkv, q_rows, q_out, kv_out;
};

LayerShape shape_of(const TargetConfig& c) {
  LayerShape s{};
  s.H = double(c.hidden_size);
  s.I = double(c.intermediate_size);
  s.D = double(c.head_dim);
  s.Hq = double(c.num_attention_heads);
  s.Hkv = double(c.num_key_value_heads);
  s.q_out = s.Hq * s.D;
  s.kv_out = s.Hkv * s.D;
  s.q_rows = c.info().hybrid ? 2 * s.q_out : s.q_out;  // hybrid: query and output gate
  return s;
}

// The MLP's matrix weights: all of them (`active` false: what memory holds) or those one token multiplies
// (`active`: an MoE layer's router, top_k experts and shared expert, what the FLOPs count).
double mlp_matrix_params(const TargetConfig& c, bool moe_layer, bool active) {
  const double H = double(c.hidden_size);
  if (!moe_layer) return 3 * H * double(c.intermediate_size);
  const MoeConfig& m = c.moe;
  const double experts = double(active ? m.top_k : m.num_experts);
  double n = H * double(m.num_experts) + experts * 3 * H * double(m.expert_intermediate);
  if (m.shared_intermediate > 0) n += 3 * H * double(m.shared_intermediate) + H;
  return n;
}

// Weights of a layer's projections, as (in x out) products: all of them, or (`active`) those that multiply
// every token.
double layer_matrix_params(const TargetConfig& c, bool linear, bool moe_layer, bool active = false) {
  const LayerShape s = shape_of(c);
  const double mlp = mlp_matrix_params(c, moe_layer, active);
  if (linear) {
    const LinearAttentionConfig& l = c.linear;
    return s.H * double(l.conv_dim() + l.value_dim() + 2 * l.num_value_heads) + double(l.value_dim()) * s.H + mlp;
  }
  return s.H * (s.q_rows + 2 * s.kv_out) + s.q_out * s.H + mlp;
}

double layer_params(const TargetConfig& c, bool linear, bool moe_layer) {
  const LayerShape s = shape_of(c);
  double n = layer_matrix_params(c, linear, moe_layer) + 2 * s.H;  // + input and post-attention norms
  if (c.mlp_bias && !moe_layer) n += 2 * s.I + s.H;
  if (linear) {
    const LinearAttentionConfig& l = c.linear;
    n += double(l.conv_dim() * l.conv_kernel + 2 * l.num_value_heads + l.value_head_dim);  // conv, A_log, dt_bias, norm
  } else {
    if (c.attention_bias) n += s.q_rows + 2 * s.kv_out + s.H;
    if (c.qk_norm) n += 2 * s.D;
    if (c.info().sinks) n += s.Hq;
  }
  if (moe_layer) {
    const MoeConfig& m = c.moe;
    if (m.router == MoeRouter::topk_softmax) n += double(m.num_experts);  // the router's bias
    if (m.experts == MoeExperts::clamped_swiglu)  // each expert's gate_up and down biases
      n += double(m.num_experts) * double(2 * m.expert_intermediate + c.hidden_size);
  }
  return n;
}

// hidden in/out + normed input, the layer's projections of every token, the MLP's gate, up and product (an MoE
// layer: the gathered rows of top_k experts and their gate/up/product, and the router's logits)
double layer_working_bytes(const TargetConfig& c, bool linear, bool moe_layer, double e, int64_t tokens) {
  const LayerShape sh = shape_of(c);
  const double T = double(tokens);
  const double mlp_width = moe_layer ? double(c.moe.top_k * (c.moe.expert_intermediate + 1) + c.moe.num_experts +
                                              3 * c.moe.shared_intermediate)
                                     : 3 * sh.I;
  double w = e * T * (3 * sh.H + mlp_width);
  if (linear) {
    const LinearAttentionConfig& l = c.linear;
    const double C = double(std::min(kDeltaNetChunk, std::max<int64_t>(1, tokens)));
    w += e * T * double(l.conv_dim() + 2 * l.value_dim()) +
         4.0 * T * C * double(l.num_value_heads) * 4;  // decay, kkT, A, QK in float32
  } else {
    w += e * T * (sh.q_rows + 2 * sh.kv_out + sh.q_out);
  }
  return w;
}

TargetFlops layer_flops(const TargetConfig& c, bool linear, bool moe_layer, bool sliding, int64_t seq_len) {
  if (seq_len < 1) throw std::invalid_argument("target_forward_flops: seq_len must be >= 1");
  const LayerShape sh = shape_of(c);
  const double S = double(seq_len);
  TargetFlops f;
  f.linear = 2 * S * layer_matrix_params(c, linear, moe_layer, /*active=*/true);
  if (linear) {
    const LinearAttentionConfig& l = c.linear;
    const double C = double(std::min<int64_t>(kDeltaNetChunk, seq_len));
    const double Dk = double(l.key_head_dim), Dv = double(l.value_head_dim), Hv = double(l.num_value_heads);
    // per value head and token: k k^T and q k^T (2 C Dk each), the unit-triangular solve over Dv + Dk columns
    // (C (Dv + Dk)), the intra-chunk output (2 C Dv), and three [Dk, Dv] state products (read, output, write)
    f.deltanet = S * Hv * (C * (5 * Dk + 3 * Dv) + 6 * Dk * Dv) + 2 * S * double(l.conv_dim() * l.conv_kernel);
  } else {
    // keys the S queries see in all: S (S + 1) / 2, or with a sliding window of W at most W each
    const double W = sliding ? double(c.sliding_window) : 0;
    const double keys = W <= 0 || S <= W ? S * (S + 1) / 2 : W * (W + 1) / 2 + (S - W) * W;
    f.attention = 4 * sh.D * keys * sh.Hq;
  }
  return f;
}

constexpr int kKinds = LayerKinds::kKinds;
constexpr bool kind_linear(int k) { return (k & 2) != 0; }
constexpr bool kind_moe(int k) { return (k & 1) != 0; }
constexpr bool kind_sliding(int k) { return (k & 4) != 0; }

}  // namespace

LayerKinds::LayerKinds(const TargetConfig& c) {
  const int64_t L = std::max<int64_t>(0, c.num_hidden_layers);
  prefix_.assign(static_cast<size_t>(L) + 1, std::array<int64_t, kKinds>{});
  for (int64_t i = 0; i < L; ++i) {
    const LayerKind& l = c.layer(i);
    const int k = index(l.mixer == Mixer::deltanet, l.mlp == Mlp::moe, l.window > 0);
    prefix_[size_t(i) + 1] = prefix_[size_t(i)];
    ++prefix_[size_t(i) + 1][size_t(k)];
  }
}

std::array<int64_t, LayerKinds::kKinds> LayerKinds::count(int64_t begin, int64_t end) const {
  const int64_t L = int64_t(prefix_.size()) - 1;
  if (begin < 0 || end < begin || end > L)
    throw std::out_of_range("LayerKinds: no layer range [" + std::to_string(begin) + ", " + std::to_string(end) + ")");
  std::array<int64_t, kKinds> n{};
  for (size_t k = 0; k < kKinds; ++k) n[k] = prefix_[size_t(end)][k] - prefix_[size_t(begin)][k];
  return n;
}

int64_t target_layer_params(const TargetConfig& c, int64_t i) {
  if (i < 0 || i >= c.num_hidden_layers) throw std::out_of_range("target_layer_params: no layer " + std::to_string(i));
  return int64_t(layer_params(c, c.is_linear_layer(i), c.is_moe_layer(i)));
}

int64_t target_params(const TargetConfig& c) {
  double n = double(c.vocab_size) * double(c.hidden_size) * (c.tie_word_embeddings ? 1 : 2) + double(c.hidden_size);
  const auto counts = LayerKinds(c).count(0, c.num_hidden_layers);
  for (int k = 0; k < kKinds; ++k)
    if (counts[size_t(k)] > 0) n += double(counts[size_t(k)]) * double(int64_t(layer_params(c, kind_linear(k), kind_moe(k))));
  return int64_t(n);
}

std::vector<StageMemory> target_stage_memory(const TargetConfig& c, int64_t dtype_bytes, int64_t num_stages,
                                             int64_t tokens, const std::vector<int64_t>& captured_layers) {
  return target_stage_memory(c, LayerKinds(c), dtype_bytes, num_stages, tokens, captured_layers);
}

std::vector<StageMemory> target_stage_memory(const TargetConfig& c, const LayerKinds& kinds, int64_t dtype_bytes,
                                             int64_t num_stages, int64_t tokens,
                                             const std::vector<int64_t>& captured_layers) {
  const int64_t L = c.num_hidden_layers;
  if (num_stages < 1 || num_stages > L)
    throw std::invalid_argument("target_stage_memory: " + std::to_string(num_stages) + " stages for " +
                                std::to_string(L) + " layers");
  const LayerShape sh = shape_of(c);
  const double e = double(dtype_bytes), T = double(tokens), vh = double(c.vocab_size) * sh.H;
  std::vector<StageMemory> out(static_cast<size_t>(num_stages));
  for (int64_t s = 0; s < num_stages; ++s) {
    StageMemory& m = out[size_t(s)];
    const int64_t begin = L * s / num_stages, end = L * (s + 1) / num_stages;
    const auto counts = kinds.count(begin, end);
    double working = 0;
    for (int k = 0; k < kKinds; ++k) {
      if (counts[size_t(k)] == 0) continue;
      m.weights += double(counts[size_t(k)]) * double(int64_t(layer_params(c, kind_linear(k), kind_moe(k)))) * e;
      working = std::max(working, layer_working_bytes(c, kind_linear(k), kind_moe(k), e, tokens));
    }
    m.activations = working;
    for (int64_t id : captured_layers)
      if (id >= begin && id < end) m.activations += e * T * sh.H;
  }
  out.front().weights += vh * e;                         // embedding
  out.back().weights += sh.H * e;                        // final norm
  if (!c.tie_word_embeddings || num_stages > 1) out.back().weights += vh * e;  // LM head (a tied one copied over)
  return out;
}

std::string layout_memory_problem(const TargetConfig& c, int64_t dtype_bytes, const DeviceLayout& layout,
                                  int64_t tokens, const std::vector<int64_t>& captured_layers,
                                  const std::function<double(at::Device)>& memory_of, const std::string& where) {
  const std::vector<StageMemory> stages = target_stage_memory(c, dtype_bytes, layout.num_stages(), tokens, captured_layers);
  auto gb = [](double b) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.2f GB", b / 1e9);
    return std::string(buf);
  };
  for (size_t r = 0; r < layout.replicas.size(); ++r)
    for (size_t s = 0; s < stages.size(); ++s) {
      const at::Device d = layout.replicas[r][s];
      const double have = memory_of(d);
      if (have < 0 || stages[s].total() <= have) continue;
      return where + ": replica " + std::to_string(r) + " cannot hold the target: its stage " + std::to_string(s) +
             " on " + d.str() + " needs at least " + gb(stages[s].total()) + " (weights " + gb(stages[s].weights) +
             " + activations " + gb(stages[s].activations) + " for " + std::to_string(tokens) + " tokens), the device has " +
             gb(have) + "; split each replica into more pipeline stages (more devices per replica, separated by ',')";
    }
  return "";
}

TargetFlops target_layer_forward_flops(const TargetConfig& c, int64_t i, int64_t seq_len) {
  return layer_flops(c, c.is_linear_layer(i), c.is_moe_layer(i), c.window_of(i) > 0, seq_len);
}

TargetFlops target_range_forward_flops(const TargetConfig& c, const LayerKinds& kinds, int64_t begin, int64_t end,
                                       int64_t seq_len) {
  if (seq_len < 1) throw std::invalid_argument("target_forward_flops: seq_len must be >= 1");
  const auto counts = kinds.count(begin, end);
  TargetFlops f;
  for (int k = 0; k < kKinds; ++k) {
    if (counts[size_t(k)] == 0) continue;
    const TargetFlops l = layer_flops(c, kind_linear(k), kind_moe(k), kind_sliding(k), seq_len);
    const double n = double(counts[size_t(k)]);
    f.linear += n * l.linear;
    f.attention += n * l.attention;
    f.deltanet += n * l.deltanet;
  }
  return f;
}

TargetFlops target_forward_flops(const TargetConfig& c, int64_t seq_len, bool with_lm_head) {
  TargetFlops f = target_range_forward_flops(c, LayerKinds(c), 0, c.num_hidden_layers, seq_len);
  if (with_lm_head) f.lm_head = 2 * double(seq_len) * double(c.vocab_size) * double(c.hidden_size);
  return f;
}

}  // namespace dflash::models
