#include "node_planner.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "family_registry.h"
#include "drafter_model.h"
#include "family_cost.h"

namespace dflash::plan {

using namespace dflash::drafter;  // the drafter this layer plans and measures

DrafterFlops drafter_step_flops(const PlanSettings& s) {
  const DrafterConfig& c = s.cfg;
  const double T = double(s.batch * s.num_anchors * c.block_size);  // block (query) tokens
  const double C = double(s.batch * s.seq_len);                     // context tokens
  const double H = double(c.hidden_size), I = double(c.intermediate_size), Hq = double(c.num_attention_heads);
  const double D = double(c.head_dim), Q = Hq * D, K = double(c.num_key_value_heads) * D;
  const double V = double(c.draft_vocab_size > 0 ? c.draft_vocab_size : c.vocab_size);
  const double n = double(c.target_layer_ids.size());
  DrafterFlops f;
  double layer_linear = 2 * T * H * Q + 2 * 2 * (C + T) * H * K + 2 * T * Q * H + 2 * T * 3 * H * I;
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    // a block's query sees the context before its anchor (half the sequence on average) within the window
    const int64_t window = c.window_for_layer(i);
    double keys = double(s.seq_len) / 2;
    if (window > 0) keys = std::min(keys, double(window));
    keys += double(c.block_size);
    const double attn = 4 * T * keys * Hq * D;
    f.linear += 3 * layer_linear;
    f.attention += 3.5 * attn;
    if (s.checkpoint.applies(i)) f.recompute += layer_linear + attn;
  }
  f.fc = 2 * (2 * C * n * H * H);
  const FamilyFlops family = family_cost(c).flops(c, cost_shape_of(s));
  // Forward and the input gradient over the drafted rows; the teacher's forward over its own rows.
  const double teacher = !step_needs_last_hidden(s) ? 0
                         : s.kl_weight > 0        ? T
                                                  : family_cost(c).teacher_rows(c, cost_shape_of(s));
  f.lm_head = 2 * 2 * T * V * H + 2 * teacher * V * H + family.lm_head;
  f.heads = family.heads;
  f.recompute += family.recompute;
  return f;
}

namespace {

std::string gb(double b) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", b / 1e9);
  return buf;
}

}  // namespace

NodePlan plan_node(const NodeSettings& s) {
  if (s.gpus < 2 || s.gpus > 256)
    throw std::invalid_argument("plan: --gpus must be in [2, 256] (the target and a drafter worker need a GPU each), "
                                "got " + std::to_string(s.gpus));
  if (!(s.gpu.memory_bytes > 0) || !(s.gpu.bf16_flops > 0))
    throw std::invalid_argument("plan: the GPU's memory and bf16 rate must be positive (--gpu-memory, --gpu-tflops)");
  for (const auto& [name, v] : {std::pair{"--target-efficiency", s.target_efficiency},
                                std::pair{"--drafter-efficiency", s.drafter_efficiency}})
    if (!(v > 0 && v <= 1))
      throw std::invalid_argument(std::string("plan: ") + name + " must be in (0, 1], got " + std::to_string(v));
  if (s.target_dtype_bytes < 1) throw std::invalid_argument("plan: the target's dtype size must be positive");
  s.target.validate("plan --node target config");
  NodePlan p;
  p.settings = s;
  const double usable = s.gpu.memory_bytes * s.usable_memory;
  const int64_t seq = s.drafter.seq_len;

  // The drafter worker: the cheapest checkpointing / loss chunk whose peak fits a device.
  const BudgetChoice choice = plan_for_budget(s.drafter, usable);
  p.drafter_fits = choice.fits;
  p.drafter_memory = choice.plan;
  const PlanSettings& used = choice.plan.settings;
  p.drafter_flops = drafter_step_flops(used);
  p.drafter_seconds = p.drafter_flops.total() / (s.gpu.bf16_flops * s.drafter_efficiency);
  const double samples_per_step = double(used.batch);

  p.target_flops = models::target_forward_flops(s.target, seq, false);
  p.target_seconds = p.target_flops.total() / (s.gpu.bf16_flops * s.target_efficiency);
  if (!p.drafter_fits) {
    p.why = "a drafter worker does not fit one GPU: " + choice.why;
    return p;
  }
  std::vector<int64_t> captured(s.drafter.cfg.target_layer_ids.begin(), s.drafter.cfg.target_layer_ids.end());
  // The last hidden state (soft labels, DSpark's teacher): the producer keeps it and ships it to the workers.
  if (step_needs_last_hidden(s.drafter)) captured.push_back(s.target.num_hidden_layers - 1);
  const int64_t L = s.target.num_hidden_layers;
  // Layers counted by kind once; each stage's sums below are then O(1), so the search over P x R x W costs the
  // same whatever the layer count (a config claiming 2^31 layers is refused by validate() above).
  const models::LayerKinds kinds(s.target);
  for (int64_t P = 1; P <= std::min<int64_t>(s.gpus - 1, L); ++P) {
    const auto stages = models::target_stage_memory(s.target, kinds, s.target_dtype_bytes, P, seq, captured);
    double largest = 0;
    for (const auto& m : stages) largest = std::max(largest, m.total());
    if (largest > usable) continue;
    // A pipeline runs at the pace of its slowest stage.
    double slowest = 0;
    for (int64_t st = 0; st < P; ++st)
      slowest = std::max(slowest, models::target_range_forward_flops(s.target, kinds, L * st / P, L * (st + 1) / P, seq).total());
    const double replica_rate = p.target_flops.total() / slowest / p.target_seconds;  // samples/s of one replica
    for (int64_t R = 1; R * P < s.gpus; ++R)
      for (int64_t W = 1; R * P + W <= s.gpus; ++W) {
        NodeSplit n;
        n.replicas = R;
        n.stages = P;
        n.workers = W;
        n.target_samples_per_s = double(R) * replica_rate;
        n.drafter_samples_per_s = double(W) * samples_per_step / p.drafter_seconds;
        n.samples_per_s = std::min(n.target_samples_per_s, n.drafter_samples_per_s);
        n.target_stage_bytes = largest;
        n.drafter_bytes = choice.plan.peak_bytes;
        p.splits.push_back(n);
      }
  }
  // Best first: more samples/s, then fewer GPUs, then fewer stages (less to hand between devices).
  std::stable_sort(p.splits.begin(), p.splits.end(), [](const NodeSplit& a, const NodeSplit& b) {
    const double tol = 1e-9 * std::max(a.samples_per_s, b.samples_per_s);
    if (std::abs(a.samples_per_s - b.samples_per_s) > tol) return a.samples_per_s > b.samples_per_s;
    if (a.gpus_used() != b.gpus_used()) return a.gpus_used() < b.gpus_used();
    return a.stages < b.stages;
  });
  if (p.splits.empty())
    p.why = "no split fits: even " + std::to_string(std::min<int64_t>(s.gpus - 1, L)) +
            " pipeline stages leave a stage of the target over " + gb(usable) + " GB";
  return p;
}

std::string format_node_plan(const NodePlan& p, size_t rows) {
  const NodeSettings& s = p.settings;
  std::ostringstream o;
  char line[320];
  std::snprintf(line, sizeof line, "node: %lld x %s (%.0f GB, %.1f dense bf16 TFLOP/s); %.0f%% of memory usable\n",
                (long long)s.gpus, s.gpu.name.c_str(), s.gpu.memory_bytes / 1e9, s.gpu.bf16_flops / 1e12,
                100 * s.usable_memory);
  o << line;
  std::snprintf(line, sizeof line,
                "sample: %lld tokens, %lld anchors x block %lld; target %s, %lld layers, hidden %lld, %.1fB params "
                "(bf16 weights %.1f GB)\n",
                (long long)s.drafter.seq_len, (long long)s.drafter.num_anchors, (long long)s.drafter.cfg.block_size,
                models::target_arch_name(s.target.arch), (long long)s.target.num_hidden_layers,
                (long long)s.target.hidden_size,
                double(models::target_params(s.target)) / 1e9,
                double(models::target_params(s.target)) * double(s.target_dtype_bytes) / 1e9);
  o << line;
  const auto& t = p.target_flops;
  std::snprintf(line, sizeof line,
                "target forward: %.1f TFLOP (linear %.1f, attention %.1f, DeltaNet %.1f) / (%.0f%% of peak) = %.3f s "
                "per sample\n",
                t.total() / 1e12, t.linear / 1e12, t.attention / 1e12, t.deltanet / 1e12, 100 * s.target_efficiency,
                p.target_seconds);
  o << line;
  const auto& d = p.drafter_flops;
  const auto& dm = p.drafter_memory.settings;
  std::snprintf(line, sizeof line,
                "drafter step (%s, batch %lld, fwd + bwd): %.1f TFLOP (layers %.1f, fc %.1f, attention %.1f, LM head + "
                "loss %.1f, %s%.1f, recompute %.1f) / (%.0f%% of peak) = %.3f s\n",
                dm.cfg.family.name(), (long long)dm.batch, d.total() / 1e12, d.linear / 1e12,
                d.fc / 1e12, d.attention / 1e12, d.lm_head / 1e12,
                drafter::family_cost(dm.cfg).heads_label(),
                d.heads / 1e12, d.recompute / 1e12, 100 * s.drafter_efficiency, p.drafter_seconds);
  o << line;
  std::snprintf(line, sizeof line, "drafter worker memory: %s GB peak (checkpoint %s, loss chunk %lld rows)%s\n",
                gb(p.drafter_memory.peak_bytes).c_str(), dm.checkpoint.name().c_str(),
                (long long)dm.loss_chunk_rows, p.drafter_fits ? "" : ": does not fit");
  o << line;
  if (p.splits.empty()) {
    o << "\n" << p.why << "\n";
    return o.str();
  }
  o << "\n  replicas x stages  workers  GPUs  target/s  drafter/s  node samples/s  bound     target GB/dev  drafter GB/dev\n";
  for (size_t i = 0; i < std::min(rows, p.splits.size()); ++i) {
    const NodeSplit& n = p.splits[i];
    std::snprintf(line, sizeof line, "  %8lld x %-6lld  %7lld  %4lld  %8.3f  %9.3f  %14.3f  %-8s  %13s  %14s\n",
                  (long long)n.replicas, (long long)n.stages, (long long)n.workers, (long long)n.gpus_used(),
                  n.target_samples_per_s, n.drafter_samples_per_s, n.samples_per_s,
                  n.target_samples_per_s <= n.drafter_samples_per_s ? "target" : "drafter",
                  gb(n.target_stage_bytes).c_str(), gb(n.drafter_bytes).c_str());
    o << line;
  }
  const NodeSplit& b = p.splits.front();
  std::string devices, workers;
  int64_t g = 0;
  auto add = [&](std::string& list, char sep) {
    if (!list.empty()) list += sep;
    list += "cuda:" + std::to_string(g++);
  };
  for (int64_t r = 0; r < b.replicas; ++r)
    for (int64_t st = 0; st < b.stages; ++st) add(devices, st == 0 ? ';' : ',');
  for (int64_t w = 0; w < b.workers; ++w) add(workers, ',');
  o << "\nbest: " << b.replicas << " replica(s) x " << b.stages << " stage(s) + " << b.workers
    << " drafter worker(s): target_devices \"" << devices << "\", drafter_devices \"" << workers << "\"\n";
  return o.str();
}

nlohmann::json node_plan_to_json(const NodePlan& p) {
  const NodeSettings& s = p.settings;
  nlohmann::json j;
  j["gpu"] = {{"name", s.gpu.name}, {"memory_bytes", s.gpu.memory_bytes}, {"bf16_flops", s.gpu.bf16_flops},
              {"count", s.gpus}, {"usable_memory", s.usable_memory}};
  j["efficiency"] = {{"target", s.target_efficiency}, {"drafter", s.drafter_efficiency}};
  j["target_flops"] = {{"linear", p.target_flops.linear}, {"attention", p.target_flops.attention},
                       {"deltanet", p.target_flops.deltanet}, {"total", p.target_flops.total()}};
  j["drafter_flops"] = {{"linear", p.drafter_flops.linear}, {"fc", p.drafter_flops.fc},
                        {"attention", p.drafter_flops.attention}, {"lm_head", p.drafter_flops.lm_head},
                        {"heads", p.drafter_flops.heads}, {"recompute", p.drafter_flops.recompute},
                        {"total", p.drafter_flops.total()}};
  j["target_seconds"] = p.target_seconds;
  j["drafter_seconds"] = p.drafter_seconds;
  j["drafter_family"] = p.drafter_memory.settings.cfg.family.name();
  j["drafter_peak_bytes"] = p.drafter_memory.peak_bytes;
  j["drafter_plan"] = plan_to_json(p.drafter_memory);  // what `dflash plan` prints for the worker's settings
  j["drafter_fits"] = p.drafter_fits;
  j["splits"] = nlohmann::json::array();
  for (const NodeSplit& n : p.splits)
    j["splits"].push_back({{"replicas", n.replicas}, {"stages", n.stages}, {"workers", n.workers},
                           {"target_samples_per_s", n.target_samples_per_s},
                           {"drafter_samples_per_s", n.drafter_samples_per_s}, {"samples_per_s", n.samples_per_s},
                           {"target_stage_bytes", n.target_stage_bytes}, {"drafter_bytes", n.drafter_bytes}});
  if (!p.why.empty()) j["why"] = p.why;
  return j;
}

}  // namespace dflash::plan
