#include "target_gguf_moe.h"

#include <ATen/ATen.h>

#include <regex>
#include <stdexcept>
#include <vector>

#include "finite_weights.h"

namespace dflash::models {
namespace {

std::string shape_text(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

std::string what(const io::GGUFFile& f) { return "GGUF '" + f.path() + "'"; }

std::string expert_name(int64_t layer, const char* kind) {
  return "blk." + std::to_string(layer) + ".ffn_" + kind + ".weight";
}

// Weights are float or quantised data: an integer tensor would become weights without a word, and a
// quantisation the reader lacks must be named before any work.
void check_weight_type(const io::GGUFFile& f, const io::GGUFTensorInfo& t) {
  const auto type = t.type;
  const io::GGMLTypeInfo* ti = io::ggml_type_info(static_cast<uint32_t>(type));
  if (type == io::GGMLType::I8 || type == io::GGMLType::I16 || type == io::GGMLType::I32 || type == io::GGMLType::I64)
    throw std::runtime_error(f.path() + ": tensor '" + t.name + "' has integer type " + ti->name +
                             ", expected float or quantised weights");
  if (!ti->dequantizable)
    throw std::runtime_error(f.path() + ": tensor '" + t.name + "': dequantising " + ti->name + " is not implemented");
}

// " in GGUF 'm.gguf' after dequantising Q8_0", for the finite check's message.
std::string dequantised(const io::GGUFFile& f, const io::GGUFTensorInfo& t) {
  return " in " + what(f) + " after dequantising " + io::ggml_type_info(static_cast<uint32_t>(t.type))->name;
}

const io::GGUFTensorInfo& expert_tensor(const io::GGUFFile& f, int64_t layer, const char* kind) {
  const std::string name = expert_name(layer, kind);
  const io::GGUFTensorInfo* t = f.find_tensor(name);
  if (!t) throw std::runtime_error(what(f) + ": missing tensor '" + name + "'");
  check_weight_type(f, *t);
  return *t;
}

// Expert e's slice of a stacked [E, rows, cols] tensor, dequantised into dst (rows x cols floats). Rows are whole
// quantisation blocks (the reader checks ne[0]), so each expert's bytes are an exact E-th of the tensor's.
void dequantize_expert(const io::GGUFFile& f, const io::GGUFTensorInfo& t, int64_t e, float* dst) {
  const int64_t E = t.shape()[0];
  const uint64_t per = t.numel() / static_cast<uint64_t>(E), bytes = t.nbytes / static_cast<uint64_t>(E);
  io::ggml_dequantize(t.type, f.tensor_data(t) + static_cast<uint64_t>(e) * bytes, dst, per);
}

}  // namespace

void read_gguf_moe_config(const io::GGUFFile& f, const std::string& arch, TargetConfig& c) {
  auto key = [&](const std::string& k) { return arch + "." + k; };
  constexpr int64_t kMax = 2147483647;
  MoeConfig& m = c.moe;
  m.num_experts = f.get_int(key("expert_count"), 1, kMax);
  m.top_k = f.get_int(key("expert_used_count"), 1, m.num_experts);  // at most expert_count
  m.expert_intermediate = f.get_int(key("expert_feed_forward_length"), 1, kMax);
  // llama.cpp's qwen3moe graph always renormalises the top-k weights (Qwen3-MoE's norm_topk_prob is true in the
  // published models); the converter writes no key for it. A file that says otherwise is followed.
  m.norm_topk_prob = f.has(key("expert_weights_norm")) ? f.get_bool(key("expert_weights_norm")) : true;
  m.sparse_step = 1;
  if (f.has(key("expert_gating_func")) && f.get_int(key("expert_gating_func")) != 1)
    throw std::runtime_error(what(f) + ": " + key("expert_gating_func") + " is " +
                             std::to_string(f.get_int(key("expert_gating_func"))) + ", expected 1 (softmax)");
  if (f.has(key("expert_weights_scale"))) {
    const double s = f.get_float(key("expert_weights_scale"));
    if (s != 0.0 && s != 1.0)  // llama.cpp scales only by a value other than 0 and 1
      throw std::runtime_error(what(f) + ": " + key("expert_weights_scale") + " is " + std::to_string(s) +
                               ", expected 1 (scaled routing weights are not supported)");
  }
  for (const char* k : {"expert_shared_count", "expert_shared_feed_forward_length", "leading_dense_block_count"})
    if (f.has(key(k)) && f.get_int(key(k)) != 0)
      throw std::runtime_error(what(f) + ": " + key(k) + " is " + std::to_string(f.get_int(key(k))) + ", expected 0 (" +
                               arch + " routes every layer and has no shared expert)");
}

void check_gguf_moe_tensors(const io::GGUFFile& f, const TargetConfig& c) {
  const int64_t E = c.moe.num_experts, H = c.hidden_size, I = c.moe.expert_intermediate;
  // A routed layer's experts come from the stacked tensors only: per-expert ('blk.N.ffn_gate.E.weight', the older
  // converters' layout) or dense ('blk.N.ffn_gate.weight') tensors beside them would be dropped without a word.
  static const std::regex other(R"(blk\.(\d+)\.ffn_(gate|up|down)(\.\d+)?\.weight)");
  for (const auto& t : f.tensors()) {
    std::smatch m;
    if (!std::regex_match(t.name, m, other)) continue;
    const int64_t layer = std::stoll(m[1].str());
    if (layer < c.num_hidden_layers && c.is_moe_layer(layer))
      throw std::runtime_error(what(f) + ": tensor '" + t.name + "' sits beside the stacked experts '" +
                               expert_name(layer, (m[2].str() + "_exps").c_str()) +
                               "' of routed layer " + m[1].str() + " (two encodings of the same weights; keep one)");
  }
  struct Want { const char* kind; std::vector<int64_t> shape; const char* dims; };
  const Want wants[] = {
      {"gate_inp", {E, H}, "[expert_count, embedding_length]"},
      {"gate_exps", {E, I, H}, "[expert_count, expert_feed_forward_length, embedding_length]"},
      {"up_exps", {E, I, H}, "[expert_count, expert_feed_forward_length, embedding_length]"},
      {"down_exps", {E, H, I}, "[expert_count, embedding_length, expert_feed_forward_length]"},
  };
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    if (!c.is_moe_layer(l)) continue;
    for (const Want& w : wants) {
      const io::GGUFTensorInfo& t = expert_tensor(f, l, w.kind);
      if (t.shape() != w.shape) {
        std::vector<int64_t> ne(w.shape.rbegin(), w.shape.rend());
        throw std::runtime_error(what(f) + ": tensor '" + t.name + "' has shape " + shape_text(t.shape()) +
                                 ", expected " + shape_text(w.shape) + " = " + w.dims + " (ggml ne " + shape_text(ne) +
                                 ")");
      }
    }
  }
}

at::Tensor gguf_expert_gate_up(const io::GGUFFile& f, int64_t layer) {
  const io::GGUFTensorInfo& gate = expert_tensor(f, layer, "gate_exps");
  const io::GGUFTensorInfo& up = expert_tensor(f, layer, "up_exps");
  const auto s = gate.shape();  // [E, I, H], checked equal to up's by check_gguf_moe_tensors
  const int64_t E = s[0], IH = s[1] * s[2];
  at::Tensor out = at::empty({E, 2 * s[1], s[2]}, at::kFloat);
  float* dst = out.data_ptr<float>();
  for (int64_t e = 0; e < E; ++e) {  // each expert's gate rows, then its up rows
    dequantize_expert(f, gate, e, dst + e * 2 * IH);
    dequantize_expert(f, up, e, dst + e * 2 * IH + IH);
  }
  check_finite_weight(out.narrow(1, 0, s[1]), at::Tensor(), gate.name, dequantised(f, gate));
  check_finite_weight(out.narrow(1, s[1], s[1]), at::Tensor(), up.name, dequantised(f, up));
  return out;
}

at::Tensor gguf_expert_down(const io::GGUFFile& f, int64_t layer) {
  return gguf_float_tensor(f, expert_tensor(f, layer, "down_exps"));
}

at::Tensor gguf_float_tensor(const io::GGUFFile& f, const io::GGUFTensorInfo& t) {
  check_weight_type(f, t);
  at::Tensor out = at::empty(t.shape(), at::kFloat);
  io::ggml_dequantize(t.type, f.tensor_data(t), out.data_ptr<float>(), t.numel());
  check_finite_weight(out, at::Tensor(), t.name, dequantised(f, t));  // named as the file names it
  return out;
}

}  // namespace dflash::models
