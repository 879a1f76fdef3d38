#include "memory_planner.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "anchor_attention_cuda_host.h"
#include "anchor_attention_reference.h"
#include "drafter_weights.h"
#include "family_cost.h"

namespace dflash::plan {

using namespace dflash::drafter;  // the drafter this layer plans and measures
namespace {

struct Dims {
  double T, C, H, Q, K, I, V, Vl, D, Hq, Hkv, L, n, e, a, r;  // Vl: LM-head rows of the loss
  bool soft;  // a third logits buffer and the teacher's hidden input: soft labels or the family's own teacher
};

Dims dims_of(const PlanSettings& s) {
  const auto& c = s.cfg;
  Dims d{};
  d.T = double(s.batch) * double(s.num_anchors) * double(c.block_size);  // query (block) tokens
  d.C = double(s.batch) * double(s.seq_len);                              // context tokens
  d.H = double(c.hidden_size);
  d.Hq = double(c.num_attention_heads);
  d.Hkv = double(c.num_key_value_heads);
  d.D = double(c.head_dim);
  d.Q = d.Hq * d.D;
  d.K = d.Hkv * d.D;
  d.I = double(c.intermediate_size);
  d.V = double(c.vocab_size);
  d.Vl = double(c.draft_vocab_size > 0 ? c.draft_vocab_size : c.vocab_size);  // a draft vocabulary's K rows
  d.L = double(c.num_hidden_layers);
  d.n = double(c.target_layer_ids.size());
  d.e = double(s.dtype_bytes);
  d.a = s.dtype_bytes == 8 ? 8.0 : 4.0;  // accumulation dtype (norm statistics, LSE, loss)
  d.r = std::min<double>(double(s.loss_chunk_rows), d.T);
  d.soft = s.kl_weight != 0.0 || family_cost(c).needs_last_hidden(c);
  return d;
}

// Tensors autograd keeps for one un-checkpointed decoder layer (decoder_layer.cpp):
//   rms_norm(x): x, rstd | q_proj/k_proj/v_proj on h1: h1 | q_norm: q, rstd | attention: q_roped, k_roped,
//   v, out, lse | k_norm: k (pre-norm), rstd | post norm: x2, rstd | gate/up on h2: h2 | swiglu_down: g, u.
double layer_saved_full(const Dims& d) {
  return d.e * (4 * d.T * d.H + 3 * d.T * d.Q + 3 * (d.C + d.T) * d.K + 2 * d.T * d.I) +
         d.a * (2 * d.T + 2 * d.T * d.Hq + (d.C + d.T) * d.Hkv);
}
// A checkpointed layer keeps only its input.
double layer_saved_ckpt(const Dims& d) { return d.e * d.T * d.H; }

// Rows x V buffers alive at once in src/ops/chunked_lm_loss_op.cpp: logits + logsumexp temporary (+ teacher logits),
// unless the family's own loss kernel holds others (FamilyMemory::loss_chunk_buffers); and what the family's objective
// holds beside them. The fused CPU cross-entropy (hard labels, fp32/bf16) holds only the raw logits, so this
// over-plans it.
double loss_chunk_bytes(const Dims& d, const FamilyMemory& fam) {
  // (the narrow-dtype raw logits and the backward cast exist only while one of the three is not allocated)
  const double buffers = fam.loss_chunk_buffers >= 0 ? fam.loss_chunk_buffers : d.r * d.Vl * d.a * (d.soft ? 3 : 2);
  return buffers + d.r * d.H * d.e + fam.loss_chunk_beside;
}

// The CUDA attention's backward as the op runs it (anchor_attention_cuda_host.h): its workspace in chunks.
kernels::cuda::BwdChunks cuda_bwd_chunks(const PlanSettings& s) {
  kernels::AnchorAttentionShape shape;
  shape.batch = s.batch;
  shape.num_blocks = s.num_anchors;
  shape.block_size = s.cfg.block_size;
  shape.context_len = s.seq_len;
  shape.q_heads = s.cfg.num_attention_heads;
  shape.kv_heads = s.cfg.num_key_value_heads;
  shape.head_dim = s.cfg.head_dim;
  return kernels::cuda::plan_bwd_chunks(shape, s.deterministic);
}

// Attention op backward workspace beyond dq/dk/dv: delta [Hq, T] and the dQ accumulator(s): on the CPU one per
// partition, on CUDA one chunk's (none in the deterministic mode).
double attention_bwd_workspace(const PlanSettings& s, const Dims& d) {
  if (s.device == PlanDevice::Cuda) return double(cuda_bwd_chunks(s).bytes());
  return d.a * d.T * d.Hq + double(s.cpu_dq_partitions) * d.a * d.T * d.Q;
}

std::string attention_bwd_how(const PlanSettings& s) {
  if (s.device == PlanDevice::Cpu) return "dq, dk, dv + delta + dQ partitions (CPU)";
  if (s.deterministic) return "dq, dk, dv + delta (deterministic dQ: no accumulator)";
  const auto c = cuda_bwd_chunks(s);
  return "dq, dk, dv + delta + fp32 dQ accumulator" +
         (c.count > 1 ? " of one chunk (" + std::to_string(c.count) + " chunks of " + std::to_string(c.batches) +
                            " batches x " + std::to_string(c.kv_heads) + " KV heads)"
                      : std::string());
}

// The reference attention (src/ops/anchor_attention_reference.h) holds one tile's temporaries at a time, forward
// or backward: the budget, or one block's when a block alone needs more, never more than a whole row's.
double reference_tile_workspace(const PlanSettings& s, const Dims& d) {
  const auto tile = [&](int64_t blocks) {
    return double(ops::reference_tile_bytes(blocks * s.cfg.block_size, s.seq_len, s.cfg.num_attention_heads,
                                            s.cfg.num_key_value_heads, s.cfg.head_dim, s.cfg.block_size, int64_t(d.a)));
  };
  return std::min(std::max(double(ops::kDefaultReferenceTileBytes), tile(1)), tile(s.num_anchors));
}

// Its backward adds dK/dV accumulators in the accumulation dtype when the compute dtype is narrower.
double reference_bwd_workspace(const PlanSettings& s, const Dims& d) {
  return reference_tile_workspace(s, d) + (d.e < d.a ? 2 * (d.C + d.T) * d.K * d.a : 0.0);
}

// The backend's backward workspace; auto plans the larger, as a run may fall back to the reference.
double attention_workspace(const PlanSettings& s, const Dims& d) {
  if (s.attention_backend == ops::AttentionBackend::Fused) return attention_bwd_workspace(s, d);
  if (s.attention_backend == ops::AttentionBackend::Reference) return reference_bwd_workspace(s, d);
  return std::max(attention_bwd_workspace(s, d), reference_bwd_workspace(s, d));
}

// Forward temporaries of the attention: none for the fused op, one tile for the reference.
double attention_fwd_workspace(const PlanSettings& s, const Dims& d) {
  return s.attention_backend == ops::AttentionBackend::Fused ? 0.0 : reference_tile_workspace(s, d);
}

int64_t count_params(const DrafterConfig& c) {
  int64_t n = 0;
  for (auto& [name, shape] : drafter_weight_shapes(c)) {
    int64_t k = 1;
    for (auto v : shape) k *= v;
    n += k;
  }
  return n;
}

int64_t largest_param(const DrafterConfig& c) {
  int64_t m = 0;
  for (auto& [name, shape] : drafter_weight_shapes(c)) {
    int64_t k = 1;
    for (auto v : shape) k *= v;
    m = std::max(m, k);
  }
  return m;
}

}  // namespace

StepCostShape cost_shape_of(const PlanSettings& s) {
  StepCostShape c;
  c.batch = s.batch;
  c.seq_len = s.seq_len;
  c.num_anchors = s.num_anchors;
  c.dtype_bytes = s.dtype_bytes;
  c.loss_chunk_rows = s.loss_chunk_rows;
  c.checkpoint = s.checkpoint;
  c.cpu = s.device == PlanDevice::Cpu;
  return c;
}

bool step_needs_last_hidden(const PlanSettings& s) {
  return s.kl_weight > 0 || family_cost(s.cfg).needs_last_hidden(s.cfg);
}

void set_run_shape(PlanSettings& s, const drafter::RunShape& shape) {
  s.seq_len = shape.max_len;
  s.num_anchors = shape.num_anchors;
  s.dtype_bytes = util::dtype_bytes(shape.dtype);
  s.checkpoint = shape.activation_checkpoint;
  s.loss_chunk_rows = shape.loss_chunk_rows;
  s.kl_weight = shape.kl_weight;
}

MemoryPlan plan_memory(const PlanSettings& s) {
  if (s.seq_len <= 0 || s.num_anchors <= 0 || s.batch <= 0)
    throw std::invalid_argument("plan: seq_len, num_anchors and batch must be positive");
  if (s.loss_chunk_rows <= 0) throw std::invalid_argument("plan: loss chunk rows must be positive");
  s.cfg.validate("plan config");
  const Dims d = dims_of(s);
  const auto& c = s.cfg;
  MemoryPlan p;
  p.settings = s;
  p.params = count_params(c);
  const double P = double(p.params);

  // Resident for the whole step.
  const double weights = P * d.e;
  // Embedding + LM head; a draft vocabulary's head is its own [K, H] copy of the target's rows (tied or not).
  const double frozen = c.draft_vocab_size > 0 ? (d.V + d.Vl) * d.H * d.e : d.V * d.H * d.e * (c.tie_word_embeddings ? 1 : 2);
  const bool master = s.master_fp32 && d.e < 4 && s.optimizer != PlanOptimizer::None;
  const double master_bytes = master ? P * 4 : 0;
  const double state_bytes = s.optimizer == PlanOptimizer::AdamW ? 2 * P * std::max(4.0, d.a)
                             : s.optimizer == PlanOptimizer::Sgd     ? P * std::max(4.0, d.a)
                                                                     : 0;
  const double inputs = d.C * d.n * d.H * d.e + (d.soft ? d.C * d.H * d.e : 0) + d.C * 9 + d.T * 32;
  const double grads_total = P * d.e;
  const double static_bytes = weights + frozen + master_bytes + state_bytes + inputs;

  // Forward tensors every layer shares: fc output (saved by hidden_norm), the context features, rope tables.
  const double context = 2 * d.C * d.H * d.e + d.C * d.a;
  const double rope = 2 * (d.T + d.C + d.T) * d.D * d.e;
  const double final_norm = 2 * d.T * d.H * d.e + d.T * d.a;  // norm input + output (saved by the loss)

  std::vector<double> saved(size_t(c.num_hidden_layers));
  std::vector<bool> ckpt(saved.size());
  double saved_sum = 0;
  for (size_t i = 0; i < saved.size(); ++i) {
    ckpt[i] = s.checkpoint.applies(int64_t(i));
    saved[i] = ckpt[i] ? layer_saved_ckpt(d) : layer_saved_full(d);
    saved_sum += saved[i];
  }
  // What the family adds (family_cost.h): all zero for the DFlash backbone.
  const FamilyMemory fam = family_cost(c).memory(c, cost_shape_of(s));
  for (size_t i = 0; i < saved.size(); ++i)
    if (!ckpt[i]) saved[i] += fam.saved_per_layer, saved_sum += fam.saved_per_layer;
  const double full = layer_saved_full(d) + fam.saved_per_layer;
  const double loss_chunk = loss_chunk_bytes(d, fam);
  const double layer_grads = (P - d.H * d.n * d.H - 3 * d.H - fam.params_outside_layers) / std::max(1.0, d.L) * d.e;

  auto phase = [&](const std::string& name, double bytes, const std::string& how) {
    p.phases.push_back({name, bytes, how});
  };
  const double base = static_bytes + context + rope;
  // Forward of the last layer (a checkpointed one briefly holds its full activations, without autograd).
  {
    const double before = saved_sum - saved.back();
    phase("forward: last layer", base + before + full + d.T * d.H * d.e + attention_fwd_workspace(s, d),
          "static + shared + saved layers 0..L-2 + one layer's activations (+ a reference attention tile)");
  }
  // The loss computes d(hidden) inside its forward (src/ops/chunked_lm_loss_op.cpp), so it holds that [T, H]
  // tensor while a chunk's logits are alive; its backward only scales it (one more [T, H]) and recomputes no
  // logits.
  phase("forward: loss chunk", base + saved_sum + final_norm + d.T * d.H * d.e + loss_chunk,
        "static + shared + all saved + final norm + d(hidden) + one loss chunk");
  // The family's terms after the LM-head loss (DFlash2's selector, its graph kept for backward).
  for (const CostTerm& f : fam.forward_phases)
    phase(f.name, base + saved_sum + final_norm + d.T * d.H * d.e + f.bytes, f.how);
  phase("backward: loss", base + saved_sum + final_norm + 2 * d.T * d.H * d.e + fam.loss_saved,
        "... + d(hidden) and its scaled copy (+ the selector's saved tensors)");
  // The family's backward before any layer's (DSpark's heads' [V, r] gradients).
  for (const CostTerm& b : fam.backward_phases)
    phase(b.name, base + saved_sum + final_norm + 2 * d.T * d.H * d.e + b.bytes, b.how);
  double grads_so_far = d.H * d.e + fam.params_outside_layers * d.e;  // norm.weight (+ the family's, from the loss)
  const double dy = d.T * d.H * d.e;
  const double dctx = d.C * d.H * d.e;
  double saved_before = saved_sum;
  for (int64_t i = c.num_hidden_layers - 1; i >= 0; --i) {
    saved_before -= saved[size_t(i)];
    const double recompute_out = ckpt[size_t(i)] ? d.T * d.H * d.e : 0;
    const double live = base + saved_before + grads_so_far + layer_grads + dctx + dy + full + recompute_out;
    // swiglu_down backward: sigmoid, silu and d(m) or m, and d(up) over T x I.
    const double mlp = live + 4 * d.T * d.I * d.e;
    // attention backward: the MLP's saved tensors are gone; d(x2), d(out), dq, dk, dv and the workspace.
    const double attn = live - d.e * (2 * d.T * d.H + 2 * d.T * d.I) + d.T * d.H * d.e + 2 * d.T * d.Q * d.e +
                        2 * (d.C + d.T) * d.K * d.e + attention_workspace(s, d);
    phase("backward: layer " + std::to_string(i) + " mlp", mlp, "");
    phase("backward: layer " + std::to_string(i) + " attention", attn, "");
    grads_so_far += layer_grads;
  }
  phase("backward: fc + hidden_norm", base + grads_total + dctx + 4 * d.C * d.H * d.a,
        "static + all grads + d(context) + norm backward temporaries");
  if (s.optimizer != PlanOptimizer::None)
    phase("optimizer step", static_bytes + grads_total + 2 * double(largest_param(c)) * 4,
          "static + all grads + fp32 temporaries of the largest parameter");

  for (auto& ph : p.phases)
    if (ph.bytes > p.peak_bytes) {
      p.peak_bytes = ph.bytes;
      p.peak_phase = ph.name;
    }

  auto term = [&](const std::string& n, double b, const std::string& how) { p.terms.push_back({n, b, how}); };
  term("weights", weights, std::to_string(p.params) + " params x " + std::to_string(s.dtype_bytes) + " B");
  term("frozen embedding + LM head", frozen,
       c.draft_vocab_size > 0 ? "V x H + K x H (draft vocabulary head)"
                              : c.tie_word_embeddings ? "V x H (tied: one copy)" : "2 x V x H");
  term("grads", grads_total, "params x dtype (allocated during backward)");
  term("master weights", master_bytes, master ? "fp32 copy" : "none");
  term("optimizer state", state_bytes, s.optimizer == PlanOptimizer::AdamW ? "AdamW m, v in fp32" : plan_optimizer_name(s.optimizer));
  term("inputs (target features, teacher hidden, batch)", inputs, "C x n x H (+ C x H soft labels)");
  term("context features (fc, hidden_norm)", context, "2 x C x H");
  term("rope tables", rope, "cos/sin for T + (C + T) positions");
  for (size_t i = 0; i < saved.size(); ++i)
    term("saved activations layer " + std::to_string(i), saved[i], ckpt[i] ? "checkpointed: input only" :
         "x, h1, q, q_rope, out, x2, h2 (T x H/Q) + k, k_rope, v ((C+T) x K) + g, u (T x I)");
  term("final norm + hidden", final_norm, "2 x T x H");
  const std::string fused_how = attention_bwd_how(s);
  const std::string reference_how = std::string("dq, dk, dv + one reference tile") + (d.e < d.a ? " + dK/dV accumulators" : "");
  term("attention (O + LSE saved; backward workspace)", attention_workspace(s, d) + d.T * d.Q * d.e + 2 * (d.C + d.T) * d.K * d.e,
       s.attention_backend == ops::AttentionBackend::Fused ? fused_how
       : s.attention_backend == ops::AttentionBackend::Reference ? reference_how
                                            : "the larger of fused (" + fused_how + ") and reference (" + reference_how + ")");
  for (const CostTerm& t : fam.terms) term(t.name, t.bytes, t.how);
  term("loss chunk", loss_chunk,
       std::to_string(int64_t(d.r)) + (c.draft_vocab_size > 0 ? " rows x K x (" : " rows x V x (") +
           (fam.loss_chunk_buffers >= 0 ? fam.loss_chunk_buffers_how
            : d.soft                    ? "3 fp32 buffers)"
                                        : "2 fp32 buffers)"));
  return p;
}

BudgetChoice plan_for_budget(PlanSettings s, double budget) {
  BudgetChoice best;
  std::vector<int64_t> policies = {0};
  for (int64_t k = s.cfg.num_hidden_layers; k >= 2; --k) policies.push_back(k);  // fewer recomputed layers first
  policies.push_back(1);
  const std::vector<int64_t> chunks = {4096, 2048, 1024, 512, 256, 128, 64};
  bool have_smallest = false;
  for (int64_t pol : policies)
    for (int64_t ch : chunks) {
      s.checkpoint = drafter::CheckpointPolicy{pol};
      s.loss_chunk_rows = ch;
      MemoryPlan p = plan_memory(s);
      if (p.peak_bytes <= budget) {
        best.fits = true;
        best.plan = p;
        return best;
      }
      if (!have_smallest || p.peak_bytes < best.plan.peak_bytes) {
        best.plan = p;
        have_smallest = true;
      }
    }
  const auto& t = best.plan.terms;
  double resident = 0;
  for (auto& x : t)
    if (x.name == "weights" || x.name == "frozen embedding + LM head" || x.name == "grads" ||
        x.name == "master weights" || x.name == "optimizer state" || x.name.rfind("inputs", 0) == 0)
      resident += x.bytes;
  std::ostringstream why;
  why << "nothing fits in " << human_bytes(budget) << ": the smallest plan (checkpoint "
      << (best.plan.settings.checkpoint.every == 1 ? "every layer" : "every " + std::to_string(best.plan.settings.checkpoint.every))
      << ", loss chunk " << best.plan.settings.loss_chunk_rows << " rows) peaks at " << human_bytes(best.plan.peak_bytes)
      << " in '" << best.plan.peak_phase << "'; weights, grads, optimizer state, frozen embedding/LM head and inputs alone take "
      << human_bytes(resident) << ". Shorten the sequence, use fewer anchors, or a smaller optimizer state.";
  best.why = why.str();
  return best;
}

std::optional<PlanOptimizer> plan_optimizer_from_text(const std::string& s) {
  if (s == "adamw") return PlanOptimizer::AdamW;
  if (s == "sgd") return PlanOptimizer::Sgd;
  if (s == "none") return PlanOptimizer::None;
  return std::nullopt;
}

std::optional<PlanDevice> plan_device_from_text(const std::string& s) {
  if (s == "cuda") return PlanDevice::Cuda;
  if (s == "cpu") return PlanDevice::Cpu;
  return std::nullopt;
}

const char* plan_optimizer_name(PlanOptimizer o) {
  return o == PlanOptimizer::Sgd ? "sgd" : o == PlanOptimizer::None ? "none" : "adamw";
}

const char* plan_device_name(PlanDevice d) { return d == PlanDevice::Cpu ? "cpu" : "cuda"; }

nlohmann::json plan_to_json(const MemoryPlan& p) {
  const auto& s = p.settings;
  nlohmann::json j;
  j["settings"] = {{"batch", s.batch}, {"max_len", s.seq_len}, {"num_anchors", s.num_anchors},
                   {"block_size", s.cfg.block_size}, {"dtype_bytes", s.dtype_bytes},
                   {"checkpoint_every", s.checkpoint.every}, {"loss_chunk_rows", s.loss_chunk_rows},
                   {"kl_weight", s.kl_weight}, {"optimizer", plan_optimizer_name(s.optimizer)},
                   {"master_fp32", s.master_fp32}, {"device", plan_device_name(s.device)},
                   {"deterministic", s.deterministic},
                   {"attention_backend", ops::attention_backend_name(s.attention_backend)}, {"params", p.params}};
  j["drafter_config"] = drafter_config_to_json(s.cfg);
  j["peak_bytes"] = p.peak_bytes;
  j["peak_gb"] = p.peak_bytes / 1e9;
  j["peak_phase"] = p.peak_phase;
  for (auto& t : p.terms) j["breakdown"].push_back({{"name", t.name}, {"bytes", t.bytes}, {"how", t.how}});
  for (auto& t : p.phases) j["phases"].push_back({{"name", t.name}, {"bytes", t.bytes}});
  return j;
}

std::string format_plan(const MemoryPlan& p) {
  const auto& s = p.settings;
  std::ostringstream o;
  char line[256];
  std::snprintf(line, sizeof line,
                "drafter: %lld layers, hidden %lld, %lld q heads x %lld, %lld kv heads, MLP %lld, vocab %lld (%.3g B params)\n",
                (long long)s.cfg.num_hidden_layers, (long long)s.cfg.hidden_size, (long long)s.cfg.num_attention_heads,
                (long long)s.cfg.head_dim, (long long)s.cfg.num_key_value_heads, (long long)s.cfg.intermediate_size,
                (long long)s.cfg.vocab_size, double(p.params) / 1e9);
  o << line;
  if (s.cfg.draft_vocab_size > 0) o << "draft vocabulary: LM head and loss over " << s.cfg.draft_vocab_size << " rows\n";
  std::snprintf(line, sizeof line,
                "step: batch %lld x seq %lld, %lld anchors x block %lld, %lld-byte dtype, checkpoint %s, loss chunk %lld rows, "
                "kl_weight %g, optimizer %s%s, device %s%s, attention %s\n",
                (long long)s.batch, (long long)s.seq_len, (long long)s.num_anchors, (long long)s.cfg.block_size,
                (long long)s.dtype_bytes,
                s.checkpoint.every == 0 ? "none" : s.checkpoint.every == 1 ? "every layer" : ("every " + std::to_string(s.checkpoint.every)).c_str(),
                (long long)s.loss_chunk_rows, s.kl_weight, plan_optimizer_name(s.optimizer),
                s.master_fp32 && s.dtype_bytes < 4 && s.optimizer != PlanOptimizer::None ? " + fp32 master" : "",
                plan_device_name(s.device), s.deterministic ? " (deterministic)" : "",
                ops::attention_backend_name(s.attention_backend));
  o << line << "\nbreakdown:\n";
  for (auto& t : p.terms) {
    std::snprintf(line, sizeof line, "  %-48s %12s   %s\n", t.name.c_str(), human_bytes(t.bytes).c_str(), t.how.c_str());
    o << line;
  }
  o << "\nlive memory by phase:\n";
  for (auto& t : p.phases) {
    std::snprintf(line, sizeof line, "  %-48s %12s\n", t.name.c_str(), human_bytes(t.bytes).c_str());
    o << line;
  }
  o << "\npredicted peak: " << human_bytes(p.peak_bytes) << " (" << p.peak_phase << ")\n";
  return o.str();
}

}  // namespace dflash::plan
