#include "target_model.h"

#include <ATen/ATen.h>
#include <ATen/Context.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>
#include <stdexcept>
#include <utility>

#include "batched_decode_attention.h"
#include "deltanet_weights.h"
#include "few_rows_linear.h"
#include "finite_weights.h"
#include "gated_deltanet.h"
#include "gpt_oss_weights.h"
#include "hybrid_norms.h"
#include "moe_weights.h"
#include "rope.h"
#include "safetensors.h"
#include "sink_attention.h"

namespace dflash::models {
namespace {

std::string layer_name(const std::string& prefix, int i, const std::string& suffix) {
  return prefix + "layers." + std::to_string(i) + "." + suffix;
}

void check_shape(const at::Tensor& t, std::vector<int64_t> expected, const std::string& name) {
  if (t.sizes().vec() != expected) {
    auto str = [](at::IntArrayRef s) {
      std::string out = "[";
      for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
      return out + "]";
    };
    throw std::runtime_error("target weight '" + name + "' has shape " + str(t.sizes()) + ", expected " +
                             str(expected));
  }
}

}  // namespace

std::vector<PipelineStage> split_layers(int num_layers, const std::vector<at::Device>& devices) {
  if (devices.empty()) throw std::invalid_argument("split_layers: no devices");
  if (static_cast<int>(devices.size()) > num_layers)
    throw std::invalid_argument("split_layers: " + std::to_string(devices.size()) + " devices for " +
                                std::to_string(num_layers) + " layers");
  std::vector<PipelineStage> out;
  const int n = static_cast<int>(devices.size());
  for (int s = 0; s < n; ++s)
    out.push_back({num_layers * s / n, num_layers * (s + 1) / n, devices[s]});
  return out;
}

TargetModel TargetModel::from_weights(const TargetConfig& given, const WeightFn& get, const HasWeightFn& has,
                                      const TargetLoadOptions& options) {
  TargetModel m;
  m.config_ = given;
  m.config_.finish();  // the layer kinds from the fields as given (a config built in code may not have them yet)
  const TargetConfig& config = m.config_;
  config.validate("(in memory)");
  m.dtype_ = options.dtype;
  const int L = static_cast<int>(config.num_hidden_layers);
  m.stages_ = options.stages.empty() ? std::vector<PipelineStage>{{0, L, at::kCPU}} : options.stages;
  // Stages must tile [0, L) in order.
  int next = 0;
  for (const auto& s : m.stages_) {
    if (s.begin != next || s.end <= s.begin)
      throw std::invalid_argument("pipeline stages must cover layers 0.." + std::to_string(L) +
                                  " in order without gaps; stage [" + std::to_string(s.begin) + ", " +
                                  std::to_string(s.end) + ") does not start at " + std::to_string(next));
    next = s.end;
  }
  if (next != L)
    throw std::invalid_argument("pipeline stages end at layer " + std::to_string(next) + ", the model has " +
                                std::to_string(L));

  auto load = [&](const std::string& name, std::vector<int64_t> shape, at::Device dev) {
    if (!has(name)) throw std::runtime_error("target weights: missing tensor '" + name + "'");
    at::Tensor t = get(name);
    check_shape(t, shape, name);
    if (!at::isFloatingType(t.scalar_type()))  // integer or bool data must not become weights silently
      throw std::runtime_error("target weights: tensor '" + name + "' has dtype " + std::string(c10::toString(t.scalar_type())) +
                               ", expected floating-point weights");
    at::Tensor held = t.to(dev, m.dtype_).contiguous();
    check_finite_weight(held, t, name);  // NaN/Inf as stored, dequantised or converted: refused, not generated from
    return held;
  };
  auto load_opt = [&](const std::string& name, std::vector<int64_t> shape, at::Device dev, bool want) {
    return want ? load(name, std::move(shape), dev) : at::Tensor();
  };
  const bool hybrid = config.info().hybrid;
  const NormWeight norm = config.info().norm;
  auto load_norm = [&](const std::string& name, int64_t n, at::Device dev) {
    at::Tensor w = load(name, {n}, dev);
    // gpt-oss multiplies by its norm weights in float32: held as float32 (rounded to the model dtype first, as
    // transformers loads them, except in float16, where its _keep_in_fp32_modules keeps them unrounded).
    if (norm == NormWeight::float32) return (m.dtype_ == at::kHalf ? get(name).to(dev) : w).to(at::kFloat).contiguous();
    // Hybrid norms are stored zero-centred: keep their effective scale (1 + w).
    return norm == NormWeight::zero_centred ? zero_centred_scale(w, m.dtype_) : w;
  };
  auto load_norm_opt = [&](const std::string& name, int64_t n, at::Device dev, bool want) {
    return want ? load_norm(name, n, dev) : at::Tensor();
  };
  // The decoder's prefix: the config's guess, else the other layout's (a text-only export of a multimodal
  // checkpoint keeps model.language_model.*, a flat config may sit beside either).
  std::string P = config.weight_prefix;
  for (const char* alt : {"model.", "model.language_model."})
    if (!has(P + "embed_tokens.weight") && has(std::string(alt) + "embed_tokens.weight")) P = alt;

  const int64_t H = config.hidden_size, D = config.head_dim, I = config.intermediate_size;
  const int64_t q_out = config.num_attention_heads * D, kv_out = config.num_key_value_heads * D;
  const int64_t q_rows = hybrid ? 2 * q_out : q_out;  // hybrid: query and output gate
  const at::Device first = m.stages_.front().device, last = m.stages_.back().device;
  m.embed_tokens_ = load(P + "embed_tokens.weight", {config.vocab_size, H}, first);
  m.final_norm_ = load_norm(P + "norm.weight", H, last);
  if (has("lm_head.weight") && !config.tie_word_embeddings) {
    m.lm_head_ = load("lm_head.weight", {config.vocab_size, H}, last);
  } else if (config.tie_word_embeddings) {
    m.lm_head_ = first == last ? m.embed_tokens_ : m.embed_tokens_.to(last);
  } else {
    throw std::runtime_error("target weights: missing tensor 'lm_head.weight' (tie_word_embeddings is false)");
  }

  m.layers_.resize(L);
  for (const auto& s : m.stages_) {
    for (int i = s.begin; i < s.end; ++i) {
      Layer& l = m.layers_[i];
      const at::Device d = s.device;
      auto name = [&](const std::string& suffix) { return layer_name(P, i, suffix); };
      l.device = d;
      l.in_norm = load_norm(name("input_layernorm.weight"), H, d);
      l.post_norm = load_norm(name("post_attention_layernorm.weight"), H, d);
      // Each piece by the layer's kind and what the architecture's row says of its tensors, never by the
      // architecture itself (docs/ARCHITECTURE.md "A target").
      auto layer_load = [&](const std::string& n, std::vector<int64_t> shape) { return load(name(n), std::move(shape), d); };
      if (config.is_linear_layer(i)) {
        l.linear_attn = true;
        l.dn = load_deltanet_weights(config.linear, H, m.dtype_, layer_load);
      } else {
        l.q = load(name("self_attn.q_proj.weight"), {q_rows, H}, d);
        l.k = load(name("self_attn.k_proj.weight"), {kv_out, H}, d);
        l.v = load(name("self_attn.v_proj.weight"), {kv_out, H}, d);
        l.o = load(name("self_attn.o_proj.weight"), {H, q_out}, d);
        const bool ab = config.attention_bias;
        l.q_bias = load_opt(name("self_attn.q_proj.bias"), {q_rows}, d, ab);
        l.k_bias = load_opt(name("self_attn.k_proj.bias"), {kv_out}, d, ab);
        l.v_bias = load_opt(name("self_attn.v_proj.bias"), {kv_out}, d, ab);
        l.o_bias = load_opt(name("self_attn.o_proj.bias"), {H}, d, ab);
        l.q_norm = load_norm_opt(name("self_attn.q_norm.weight"), D, d, config.qk_norm);
        l.k_norm = load_norm_opt(name("self_attn.k_norm.weight"), D, d, config.qk_norm);
        l.sinks = load_opt(name("self_attn.sinks"), {config.num_attention_heads}, d, config.layer(i).sinks);
      }
      if (config.is_moe_layer(i)) {
        l.moe_layer = true;
        auto layer_has = [&](const std::string& n) { return has(name(n)); };
        switch (config.info().experts) {  // how the architecture stores a routed layer (its row)
          case ExpertWeights::gate_up_down:
            l.moe = load_moe_weights(config, layer_load, layer_has, name);
            break;
          case ExpertWeights::interleaved_biased:
            l.moe = load_gpt_oss_moe(config, {[&](const std::string& n) { return get(name(n)); }, layer_has, name, d,
                                              m.dtype_});
            break;
        }
        continue;
      }
      const bool mb = config.mlp_bias;
      l.gate = load(name("mlp.gate_proj.weight"), {I, H}, d);
      l.up = load(name("mlp.up_proj.weight"), {I, H}, d);
      l.down = load(name("mlp.down_proj.weight"), {H, I}, d);
      l.gate_bias = load_opt(name("mlp.gate_proj.bias"), {I}, d, mb);
      l.up_bias = load_opt(name("mlp.up_proj.bias"), {I}, d, mb);
      l.down_bias = load_opt(name("mlp.down_proj.bias"), {H}, d, mb);
    }
  }
  m.rope_ = rope_frequencies(config.rope, config.rotary_dim(), config.max_position_embeddings);
  return m;
}

RopeFrequencies TargetModel::rope_for(int64_t last) const {
  if (!rope_depends_on_length(config_.rope, config_.max_position_embeddings, last)) return rope_;
  return rope_frequencies(config_.rope, config_.rotary_dim(), config_.max_position_embeddings, last + 1);
}

TargetModel TargetModel::load_hf(const std::string& dir, const TargetLoadOptions& options) {
  TargetConfig config = load_target_config(dir);
  for (const auto& note : config.notes) std::fprintf(stderr, "note: target %s: %s\n", dir.c_str(), note.c_str());
  auto folder = io::SafetensorsFolder::open(dir);
  return from_weights(
      config, [&](const std::string& n) { return folder.load(n); },
      [&](const std::string& n) { return folder.contains(n); }, options);
}

KVCache TargetModel::make_cache(int64_t batch, int64_t capacity) const {
  std::vector<at::Device> devs;
  for (const auto& l : layers_) devs.push_back(l.device);
  if (config_.num_linear_layers() == 0)
    return KVCache(batch, capacity, config_.num_key_value_heads, config_.head_dim, dtype_, devs);
  std::vector<std::optional<LinearStateShape>> linear(layers_.size());
  const LinearAttentionConfig& lc = config_.linear;
  for (size_t i = 0; i < layers_.size(); ++i)
    if (layers_[i].linear_attn)
      linear[i] = LinearStateShape{lc.conv_dim(), lc.conv_kernel, lc.num_key_heads, lc.num_value_heads,
                                   lc.key_head_dim, lc.value_head_dim};
  return KVCache(batch, capacity, config_.num_key_value_heads, config_.head_dim, dtype_, devs, linear);
}

// Matches HF: normalise in float32, cast back, then scale by the weight (hybrid: hybrid_norms.h).
at::Tensor TargetModel::rms_norm(const at::Tensor& x, const at::Tensor& w) const {
  const NormWeight norm = config_.info().norm;
  if (norm == NormWeight::zero_centred) return hybrid_rms_norm(x, w, config_.rms_norm_eps);
  at::Tensor xf = x.to(at::kFloat);
  at::Tensor var = xf.pow(2).mean(-1, /*keepdim=*/true);
  // gpt-oss: the float32 weight scales before the cast back
  if (norm == NormWeight::float32) return (w * (xf * at::rsqrt(var + config_.rms_norm_eps))).to(x.scalar_type());
  return w * (xf * at::rsqrt(var + config_.rms_norm_eps)).to(x.scalar_type());
}

std::map<std::string, at::Tensor> TargetModel::layer_weights(int i) const {
  if (i < 0 || i >= int(layers_.size()))
    throw std::out_of_range("target layer " + std::to_string(i) + " does not exist (the target has " +
                            std::to_string(layers_.size()) + " layers)");
  const Layer& l = layers_[size_t(i)];
  std::map<std::string, at::Tensor> out;
  auto put = [&](const char* name, const at::Tensor& t) {
    if (t.defined()) out.emplace(name, t);
  };
  auto scale = [&](const at::Tensor& t) {
    return t.defined() && config_.info().norm != NormWeight::after_cast ? t.to(dtype_) : t;
  };
  put("input_layernorm.weight", scale(l.in_norm));
  if (config_.info().hybrid && l.q.defined()) {  // drop the output-gate half of each head's rows
    const int64_t Hq = config_.num_attention_heads, D = config_.head_dim;
    put("self_attn.q_proj.weight", l.q.view({Hq, 2 * D, -1}).narrow(1, 0, D).reshape({Hq * D, -1}));
  } else {
    put("self_attn.q_proj.weight", l.q);
  }
  put("self_attn.k_proj.weight", l.k);
  put("self_attn.v_proj.weight", l.v);
  put("self_attn.o_proj.weight", l.o);
  put("self_attn.q_norm.weight", scale(l.q_norm));
  put("self_attn.k_norm.weight", scale(l.k_norm));
  put("post_attention_layernorm.weight", scale(l.post_norm));
  put("mlp.gate_proj.weight", l.gate);
  put("mlp.up_proj.weight", l.up);
  put("mlp.down_proj.weight", l.down);
  return out;
}

at::Tensor TargetModel::embed(const at::Tensor& input_ids) const {
  return at::embedding(embed_tokens_, input_ids.to(embed_tokens_.device()));
}

at::Tensor TargetModel::lm_head(const at::Tensor& last_hidden) const {
  return few_rows_linear(last_hidden.to(lm_head_.device()), lm_head_).to(at::kFloat);
}

at::Tensor TargetModel::linear(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b,
                               const at::Tensor& w_onednn) const {
  // oneDNN only for batched decode with several rows (one row and the plain forward: few_rows_linear decides).
  if (!w_onednn.defined() || x.numel() == x.size(-1)) return few_rows_linear(x, w, b);
  std::vector<int64_t> shape = x.sizes().vec();
  shape.back() = w.size(0);
  at::Tensor x2 = x.reshape({-1, x.size(-1)}).contiguous().to_mkldnn();
  return at::mkldnn_linear(x2, w_onednn, b.defined() ? std::optional<at::Tensor>(b) : std::nullopt)
      .to_dense()
      .view(shape);
}

void TargetModel::enable_onednn_decode() {
  if (!at::hasMKLDNN() || dtype_ != at::kFloat) return;
  auto copy = [](const at::Tensor& w) { return w.defined() && w.device().is_cpu() ? w.to_mkldnn() : at::Tensor(); };
  for (Layer& l : layers_) {
    l.onednn = {copy(l.q), copy(l.k), copy(l.v), copy(l.o), copy(l.gate), copy(l.up), copy(l.down)};
  }
  lm_head_onednn_ = copy(lm_head_);
}

TargetModel::AttentionInputs TargetModel::attention_inputs(int i, const at::Tensor& x, const at::Tensor& cos,
                                                          const at::Tensor& sin, bool onednn) const {
  const Layer& l = layers_[i];
  const int64_t B = x.size(0), T = x.size(1), D = config_.head_dim;
  const int64_t Hq = config_.num_attention_heads, Hkv = config_.num_key_value_heads;
  at::Tensor h = rms_norm(x, l.in_norm);
  const bool od = onednn && !l.onednn.empty();
  const at::Tensor none;
  AttentionInputs r;
  at::Tensor q;
  if (config_.info().hybrid) {  // each head's 2D rows: D of query, then D of output gate
    at::Tensor qg = linear(h, l.q, l.q_bias, od ? l.onednn[0] : none).view({B, T, Hq, 2 * D});
    q = qg.narrow(-1, 0, D);
    r.gate = qg.narrow(-1, D, D).reshape({B, T, Hq * D});
  } else {
    q = linear(h, l.q, l.q_bias, od ? l.onednn[0] : none).view({B, T, Hq, D});
  }
  at::Tensor k = linear(h, l.k, l.k_bias, od ? l.onednn[1] : none).view({B, T, Hkv, D});
  r.v = linear(h, l.v, l.v_bias, od ? l.onednn[2] : none).view({B, T, Hkv, D}).transpose(1, 2);
  if (config_.qk_norm) {
    q = rms_norm(q, l.q_norm);
    k = rms_norm(k, l.k_norm);
  }
  r.q = apply_rope(q.transpose(1, 2), cos, sin);
  r.k = apply_rope(k.transpose(1, 2), cos, sin);
  return r;
}

at::Tensor TargetModel::mlp_block(int i, const at::Tensor& x, bool onednn) const {
  const Layer& l = layers_[i];
  const bool od = onednn && !l.onednn.empty();
  const at::Tensor none;
  at::Tensor h = rms_norm(x, l.post_norm);
  if (l.moe_layer) return x + moe_forward(l.moe, config_.moe, h);
  at::Tensor mlp = at::silu(linear(h, l.gate, l.gate_bias, od ? l.onednn[4] : none)) *
                   linear(h, l.up, l.up_bias, od ? l.onednn[5] : none);
  return x + linear(mlp, l.down, l.down_bias, od ? l.onednn[6] : none);
}

at::Tensor TargetModel::attention_output_and_mlp(int i, const at::Tensor& x, const at::Tensor& attn,
                                                 const at::Tensor& gate, bool onednn) const {
  const Layer& l = layers_[i];
  const int64_t B = x.size(0), T = x.size(1);
  const bool od = onednn && !l.onednn.empty();
  const at::Tensor none;
  at::Tensor a = attn.transpose(1, 2).reshape({B, T, -1});
  if (gate.defined()) a = a * at::sigmoid(gate);
  return mlp_block(i, x + linear(a, l.o, l.o_bias, od ? l.onednn[3] : none), onednn);
}

at::Tensor TargetModel::deltanet_block(int i, const at::Tensor& x, const at::Tensor& conv0, const at::Tensor& rec0,
                                       DeltaNetOutput* out, bool onednn) const {
  const Layer& l = layers_[i];
  const LinearAttentionConfig& lc = config_.linear;
  const int64_t B = x.size(0);
  at::Tensor c0 = conv0, r0 = rec0;
  if (!c0.defined()) c0 = at::zeros({B, lc.conv_dim(), lc.conv_kernel - 1}, x.options());
  if (!r0.defined())
    r0 = at::zeros({B, lc.num_value_heads, lc.key_head_dim, lc.value_head_dim},
                   x.options().dtype(gdn::state_dtype(x.scalar_type())));
  *out = deltanet_forward(l.dn, lc, config_.rms_norm_eps, rms_norm(x, l.in_norm), c0, r0);
  return mlp_block(i, x + out->out, onednn);
}

at::Tensor TargetModel::layer_forward(int i, const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                                      KVCache* cache, int64_t past) const {
  const int64_t T = x.size(1);
  if (layers_[i].linear_attn) {
    DeltaNetOutput d;
    if (!cache) return deltanet_block(i, x, {}, {}, &d, false);
    LinearState& st = cache->linear(i);
    at::Tensor y = deltanet_block(i, x, st.conv(), st.recurrent(), &d, false);
    st.commit(past, std::move(d.conv), std::move(d.rec), std::move(d.record));
    return y;
  }
  auto [q, k, v, gate] = attention_inputs(i, x, cos, sin);
  at::Tensor attn;
  if (layers_[i].sinks.defined()) {  // gpt-oss: sinks and (sliding layers) a window, over the cache when there is one
    if (!cache) return attention_output_and_mlp(i, x, sink_attention(q, k, v, layers_[i].sinks, 0, config_.window_of(i)), gate);
    auto [k_all, v_all] = cache->store(i, k, v);
    return attention_output_and_mlp(i, x, sink_attention(q, k_all, v_all, layers_[i].sinks, past, config_.window_of(i)), gate);
  }
  if (cache) {
    auto [k_all, v_all] = cache->store(i, k, v);
    if (past == 0) {
      attn = at::scaled_dot_product_attention(q, k_all, v_all, {}, 0.0, /*is_causal=*/T > 1, std::nullopt, true);
    } else {
      // Query t (absolute position past + t) sees keys 0..past + t.
      at::Tensor mask;
      if (T > 1) {
        auto opts = at::TensorOptions().dtype(at::kLong).device(x.device());
        mask = at::arange(past + T, opts).unsqueeze(0) <= (at::arange(T, opts) + past).unsqueeze(1);
      }
      attn = at::scaled_dot_product_attention(q, k_all, v_all, mask.defined() ? std::optional<at::Tensor>(mask)
                                                                             : std::nullopt,
                                              0.0, false, std::nullopt, true);
    }
  } else {
    attn = at::scaled_dot_product_attention(q, k, v, {}, 0.0, /*is_causal=*/T > 1, std::nullopt, true);
  }
  return attention_output_and_mlp(i, x, attn, gate);
}

void TargetModel::check_cache_layers(const KVCache& cache, const char* who) const {
  for (int i = 0; i < static_cast<int>(layers_.size()); ++i)
    if (cache.is_linear(i) != layers_[size_t(i)].linear_attn)
      throw std::invalid_argument(std::string(who) + ": the cache's layer " + std::to_string(i) + " holds " +
                                  (cache.is_linear(i) ? "a Gated DeltaNet state" : "keys and values") +
                                  ", this model's layer is " +
                                  (layers_[size_t(i)].linear_attn ? "Gated DeltaNet" : "attention") +
                                  " (a cache made by another model?)");
}

std::vector<bool> TargetModel::capture_flags(const std::vector<int>& layers, const char* who) const {
  const int L = static_cast<int>(layers_.size());
  std::vector<bool> capture(L, false);
  for (int c : layers) {
    if (c < 0 || c >= L)
      throw std::invalid_argument(std::string(who) + ": capture layer " + std::to_string(c) + " outside [0, " +
                                  std::to_string(L) + ")");
    capture[c] = true;
  }
  return capture;
}

StagedForward TargetModel::begin_forward(const at::Tensor& input_ids, KVCache* cache,
                                        const std::vector<int>& capture_layers, bool want_logits,
                                        bool want_last_hidden) const {
  if (input_ids.dim() != 2)
    throw std::invalid_argument("target forward: input_ids must be [batch, T], got " +
                                std::to_string(input_ids.dim()) + " dims");
  if (input_ids.scalar_type() != at::kLong) throw std::invalid_argument("target forward: input_ids must be int64");
  if (input_ids.size(0) < 1 || input_ids.size(1) < 1)
    throw std::invalid_argument("target forward: input_ids must hold at least one token per row, got [" +
                                std::to_string(input_ids.size(0)) + ", " + std::to_string(input_ids.size(1)) + "]");
  if (input_ids.device().is_cpu()) {  // (on a GPU this check would cost a sync; embedding still bounds-checks)
    const int64_t lo = input_ids.min().item<int64_t>(), hi = input_ids.max().item<int64_t>();
    if (lo < 0 || hi >= config_.vocab_size)
      throw std::invalid_argument("target forward: token id " + std::to_string(lo < 0 ? lo : hi) +
                                  " outside the vocabulary [0, " + std::to_string(config_.vocab_size) + ")");
  }
  const int L = static_cast<int>(layers_.size());
  StagedForward f;
  f.capture = capture_flags(capture_layers, "target forward");
  const int64_t T = input_ids.size(1);
  f.cache = cache;
  f.past = cache ? cache->length() : 0;
  if (cache && cache->length() + T > cache->capacity())
    throw std::length_error("target forward: " + std::to_string(cache->length()) + " cached + " + std::to_string(T) +
                            " new tokens exceed the KV cache capacity " + std::to_string(cache->capacity()));
  if (cache && cache->num_layers() != L) throw std::invalid_argument("target forward: cache has the wrong layer count");
  if (cache && cache->batch() != input_ids.size(0))
    throw std::invalid_argument("target forward: " + std::to_string(input_ids.size(0)) + " rows for a cache of batch " +
                                std::to_string(cache->batch()));
  if (cache) check_cache_layers(*cache, "target forward");
  f.want_logits = want_logits;
  f.want_last_hidden = want_last_hidden;
  std::tie(f.cos, f.sin) = rope_cos_sin(rope_for(f.past + T - 1), f.past, T);
  f.x = embed(input_ids);
  return f;
}

void TargetModel::forward_stage(size_t stage, StagedForward& f) const {
  if (stage >= stages_.size())
    throw std::out_of_range("target forward: stage " + std::to_string(stage) + " of " + std::to_string(stages_.size()));
  const PipelineStage& s = stages_[stage];
  const int L = static_cast<int>(layers_.size());
  f.x = f.x.to(s.device);
  const at::Tensor cos = f.cos.to(s.device, dtype_), sin = f.sin.to(s.device, dtype_);
  for (int i = s.begin; i < s.end; ++i) {
    f.x = layer_forward(i, f.x, cos, sin, f.cache, f.past);
    if (f.capture[size_t(i)]) f.out.hidden[i] = f.x;
  }
  if (stage + 1 < stages_.size()) return;
  if (f.cache) f.cache->advance(f.x.size(1));
  if (f.want_logits || f.want_last_hidden || f.capture[size_t(L - 1)]) {
    at::Tensor last = rms_norm(f.x.to(final_norm_.device()), final_norm_);
    // HF's hidden_states[L] is the final-normed output, not the raw output of the last layer.
    if (f.capture[size_t(L - 1)]) f.out.hidden[L - 1] = last;
    if (f.want_logits) f.out.logits = lm_head(last);
    if (f.want_last_hidden) f.out.last_hidden = last;
  }
}

TargetOutput TargetModel::forward(const at::Tensor& input_ids, KVCache* cache, const std::vector<int>& capture_layers,
                                  bool want_logits, bool want_last_hidden) const {
  StagedForward f = begin_forward(input_ids, cache, capture_layers, want_logits, want_last_hidden);
  for (size_t s = 0; s < stages_.size(); ++s) forward_stage(s, f);
  return std::move(f.out);
}

TargetModel TargetModel::replicate(const std::vector<at::Device>& devices) const {
  if (devices.size() != stages_.size())
    throw std::invalid_argument("replicate: " + std::to_string(devices.size()) + " devices for a model of " +
                                std::to_string(stages_.size()) + " pipeline stages");
  auto moved = [](const at::Tensor& t, at::Device d) { return !t.defined() || t.device() == d ? t : t.to(d); };
  TargetModel m;
  m.config_ = config_;
  m.dtype_ = dtype_;
  m.stages_ = stages_;
  for (size_t s = 0; s < stages_.size(); ++s) m.stages_[s].device = devices[s];
  m.layers_.resize(layers_.size());
  for (size_t s = 0; s < stages_.size(); ++s) {
    const at::Device d = devices[s];
    for (int i = stages_[s].begin; i < stages_[s].end; ++i) {
      const Layer& a = layers_[size_t(i)];
      Layer& b = m.layers_[size_t(i)];
      b.device = d;
      b.linear_attn = a.linear_attn;
      b.moe_layer = a.moe_layer;
      const std::pair<const at::Tensor*, at::Tensor*> tensors[] = {
          {&a.in_norm, &b.in_norm}, {&a.q, &b.q}, {&a.k, &b.k}, {&a.v, &b.v}, {&a.o, &b.o}, {&a.q_bias, &b.q_bias},
          {&a.k_bias, &b.k_bias}, {&a.v_bias, &b.v_bias}, {&a.o_bias, &b.o_bias}, {&a.q_norm, &b.q_norm},
          {&a.k_norm, &b.k_norm}, {&a.post_norm, &b.post_norm}, {&a.gate, &b.gate}, {&a.up, &b.up},
          {&a.down, &b.down}, {&a.gate_bias, &b.gate_bias}, {&a.up_bias, &b.up_bias}, {&a.down_bias, &b.down_bias},
          {&a.dn.in_qkv, &b.dn.in_qkv}, {&a.dn.in_z, &b.dn.in_z}, {&a.dn.in_b, &b.dn.in_b}, {&a.dn.in_a, &b.dn.in_a},
          {&a.dn.out, &b.dn.out}, {&a.dn.conv, &b.dn.conv}, {&a.dn.neg_A, &b.dn.neg_A},
          {&a.dn.dt_bias, &b.dn.dt_bias}, {&a.dn.norm, &b.dn.norm}, {&a.moe.router, &b.moe.router},
          {&a.moe.gate_up, &b.moe.gate_up}, {&a.moe.down, &b.moe.down},
          {&a.moe.shared_gate_proj, &b.moe.shared_gate_proj}, {&a.moe.shared_up, &b.moe.shared_up},
          {&a.moe.shared_down, &b.moe.shared_down}, {&a.moe.shared_gate, &b.moe.shared_gate},
          {&a.moe.router_bias, &b.moe.router_bias}, {&a.moe.gate_up_bias, &b.moe.gate_up_bias},
          {&a.moe.down_bias, &b.moe.down_bias}, {&a.sinks, &b.sinks}};
      for (const auto& [from, to] : tensors) *to = moved(*from, d);
      if (a.device == d) b.onednn = a.onednn;  // oneDNN copies are CPU-only: kept only where the layer stays
    }
  }
  const at::Device first = devices.front(), last = devices.back();
  m.embed_tokens_ = moved(embed_tokens_, first);
  m.final_norm_ = moved(final_norm_, last);
  m.lm_head_ = lm_head_.is_same(embed_tokens_) && first == last ? m.embed_tokens_ : moved(lm_head_, last);
  if (lm_head_.device() == last) m.lm_head_onednn_ = lm_head_onednn_;
  m.rope_ = rope_;
  return m;
}

at::Tensor TargetModel::decode_batch(const std::vector<int64_t>& tokens, const std::vector<KVCache*>& caches,
                                     bool fused_attention, const std::vector<int>& capture_layers,
                                     std::map<int, at::Tensor>* hidden) const {
  const int64_t B = static_cast<int64_t>(tokens.size());
  const int L = static_cast<int>(layers_.size());
  const std::vector<bool> capture = capture_flags(capture_layers, "decode_batch");
  if (!capture_layers.empty() && !hidden) throw std::invalid_argument("decode_batch: capture layers given, no output map");
  if (B < 1 || caches.size() != tokens.size())
    throw std::invalid_argument("decode_batch: " + std::to_string(tokens.size()) + " tokens for " +
                                std::to_string(caches.size()) + " caches (need one per sequence, at least one)");
  std::vector<int64_t> positions(tokens.size());
  for (int64_t b = 0; b < B; ++b) {
    const KVCache* c = caches[b];
    const std::string who = "decode_batch: sequence " + std::to_string(b);
    if (!c) throw std::invalid_argument(who + " has no cache");
    if (c->batch() != 1) throw std::invalid_argument(who + ": cache batch must be 1, got " + std::to_string(c->batch()));
    if (c->num_layers() != L) throw std::invalid_argument(who + ": cache has the wrong layer count");
    if (c->length() + 1 > c->capacity())
      throw std::length_error(who + ": KV cache full (" + std::to_string(c->capacity()) + " positions)");
    check_cache_layers(*c, who.c_str());
    if (tokens[b] < 0 || tokens[b] >= config_.vocab_size)
      throw std::invalid_argument(who + ": token id " + std::to_string(tokens[b]) + " outside the vocabulary [0, " +
                                  std::to_string(config_.vocab_size) + ")");
    for (int64_t e = 0; e < b; ++e)
      if (caches[e] == c) throw std::invalid_argument(who + " shares its cache with sequence " + std::to_string(e));
    positions[b] = c->length();
  }
  at::Tensor cos_cpu, sin_cpu;
  if (rope_depends_on_length(config_.rope, config_.max_position_embeddings,
                             *std::max_element(positions.begin(), positions.end()))) {
    // "dynamic" beyond max_position_embeddings: each sequence's frequencies for its own length, as it would
    // decode alone.
    std::vector<at::Tensor> cos_rows, sin_rows;
    for (int64_t p : positions) {
      auto [c, s] = rope_cos_sin(rope_for(p), p, 1);
      cos_rows.push_back(c), sin_rows.push_back(s);
    }
    cos_cpu = at::cat(cos_rows), sin_cpu = at::cat(sin_rows);
  } else {
    std::tie(cos_cpu, sin_cpu) = rope_cos_sin_at(rope_, at::tensor(positions, at::kLong));
  }
  const int64_t D = cos_cpu.size(1);  // rotated dims per head
  at::Tensor x = embed(at::tensor(tokens, at::kLong).view({B, 1}));  // [B, 1, hidden]
  for (const auto& s : stages_) {
    x = x.to(s.device);
    // [B, 1, 1, D]: row b's rotation broadcast over its heads.
    at::Tensor cos = cos_cpu.to(s.device, dtype_).view({B, 1, 1, D}), sin = sin_cpu.to(s.device, dtype_).view({B, 1, 1, D});
    for (int i = s.begin; i < s.end; ++i) {
      if (layers_[i].linear_attn) {  // the sequences' states stacked into one batch, split back after the step
        std::vector<at::Tensor> conv, rec;
        for (KVCache* c : caches) conv.push_back(c->linear(i).conv()), rec.push_back(c->linear(i).recurrent());
        DeltaNetOutput d;
        x = deltanet_block(i, x, at::cat(conv, 0), at::cat(rec, 0), &d, /*onednn=*/true);
        for (int64_t b = 0; b < B; ++b)
          caches[b]->linear(i).commit(positions[b], d.conv.narrow(0, b, 1), d.rec.narrow(0, b, 1), {}, /*rollback=*/false);
      } else {
        auto [q, k, v, gate] = attention_inputs(i, x, cos, sin, /*onednn=*/true);
        const at::Tensor attn = layers_[i].sinks.defined()
                                    ? sink_decode_attention(i, q, k, v, caches, layers_[i].sinks, config_.window_of(i))
                                    : batched_decode_attention(i, q, k, v, caches, fused_attention);
        x = attention_output_and_mlp(i, x, attn, gate, /*onednn=*/true);
      }
      if (capture[i] && i != L - 1) (*hidden)[i] = x.view({B, -1});
    }
  }
  for (KVCache* c : caches) c->advance(1);
  at::Tensor last = rms_norm(x.to(final_norm_.device()), final_norm_).view({B, -1});
  if (capture[L - 1]) (*hidden)[L - 1] = last;  // as forward(): HF's last hidden state is the final-normed one
  return linear(last, lm_head_, {}, lm_head_onednn_).to(at::kFloat);
}

std::vector<int64_t> TargetModel::generate(const std::vector<int64_t>& prompt, int64_t max_new,
                                           const std::vector<int64_t>& eos_ids, GenerateStats* stats) const {
  using clock = std::chrono::steady_clock;
  if (prompt.empty()) throw std::invalid_argument("generate: empty prompt");
  std::vector<int64_t> out;
  if (max_new <= 0) return out;
  KVCache cache = make_cache(1, static_cast<int64_t>(prompt.size()) + max_new);
  auto next_token = [&](const at::Tensor& ids) {
    TargetOutput o = forward(ids, &cache, {}, false, true);
    return lm_head(o.last_hidden.narrow(1, -1, 1)).argmax(-1).item<int64_t>();
  };
  auto t0 = clock::now();
  at::Tensor ids = at::tensor(prompt, at::kLong).view({1, -1});
  int64_t tok = next_token(ids);
  auto t1 = clock::now();
  out.push_back(tok);
  auto is_eos = [&](int64_t t) { return std::find(eos_ids.begin(), eos_ids.end(), t) != eos_ids.end(); };
  while (static_cast<int64_t>(out.size()) < max_new && !is_eos(tok)) {
    tok = next_token(at::full({1, 1}, tok, at::kLong));
    out.push_back(tok);
  }
  auto t2 = clock::now();
  if (stats) {
    stats->prompt_tokens = static_cast<int64_t>(prompt.size());
    stats->new_tokens = static_cast<int64_t>(out.size());
    stats->prefill_seconds = std::chrono::duration<double>(t1 - t0).count();
    stats->decode_seconds = std::chrono::duration<double>(t2 - t1).count();
  }
  return out;
}

}  // namespace dflash::models
