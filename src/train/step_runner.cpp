#include "step_runner.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <future>
#include <sstream>
#include <thread>

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include "compute_settings.h"
#include "draft_vocab.h"

namespace dflash::train {
namespace {

std::string number(double v) {
  if (std::isnan(v)) return "nan";  // not the platform's "-nan"
  std::ostringstream s;
  s << v;
  return s.str();
}

}  // namespace

DivergedError::DivergedError(int64_t step_, double loss, double grad_norm)
    : std::runtime_error("training diverged at step " + std::to_string(step_) + ": loss " + number(loss) +
                         ", gradient norm " + number(grad_norm)),
      step(step_) {}

StepRunner::StepRunner(const TrainConfig& cfg, const RunContext& run, const TargetSide& side, MasterState& master,
                       const TrainHooks& hooks)
    : cfg_(cfg), run_(run), dcfg_(side.dcfg), family_(drafter::family_training(side.dcfg)), master_(master),
      hooks_(hooks) {
  loss_ = run_loss_options(cfg, dcfg_);
  checkpointing_ = cfg.activation_checkpoint;
  const size_t W = run.drafter_devices.size();
  // Threads per worker: as set, else the machine's cores shared among the workers.
  const int64_t threads = cfg.threads > 0 ? ops::resolve_threads(cfg.threads, "train config: 'threads'")
                                          : std::max<int64_t>(1, ops::resolve_threads(0, "") / int64_t(W));
  if (side.draft_ids.defined()) draft_table_ = target_to_draft_table(side.draft_ids, side.frozen.embed.size(0));
  std::vector<std::string> names;
  for (const auto& [n, t] : master.named) names.push_back(n);
  replicas_.resize(W);
  for (size_t i = 0; i < W; ++i) {
    Replica& r = replicas_[i];
    r.device = run.drafter_devices[i];
    r.w = drafter::drafter_weights_from(
        dcfg_, names,
        [&](const std::string& n) {
          for (const auto& [k, t] : master.named)
            if (k == n) return t.detach().to(r.device, run.compute, false, /*copy=*/true);
          throw std::logic_error("replica: no master weight " + n);
        },
        run.compute, "replica");
    for (const auto& [n, t] : r.w.named()) r.params.push_back(t);  // same order as the master's
    r.w.set_requires_grad(true);
    r.frozen.embed = side.frozen.embed.to(r.device, run.compute);
    // A draft vocabulary's head is its own [K, H] slice of the target's rows, tied or not.
    r.frozen.lm_head = !draft_table_.defined() && (dcfg_.tie_word_embeddings || side.frozen.lm_head.is_same(side.frozen.embed))
                           ? r.frozen.embed
                           : side.frozen.lm_head.to(r.device, run.compute);
    workers_.push_back(std::make_unique<WorkerThread>([threads] { ops::set_thread_local_threads(threads); }));
  }
}

StepRunner::~StepRunner() = default;

drafter::DrafterAttentionUse run_attention_use(const TrainConfig& cfg) {
  drafter::DrafterAttentionUse use;
  use.context_len = cfg.max_len;
  use.packed = cfg.pack;
  use.backward = true;
  use.seed = uint64_t(cfg.seed);
  return use;
}

std::vector<ops::AttentionCheckSpec> run_attention_specs(const TrainConfig& cfg, const drafter::DrafterConfig& d,
                                                         at::ScalarType compute, at::Device device) {
  return drafter::drafter_attention_specs(d, device, compute, run_attention_use(cfg));
}

std::vector<ops::AttentionChoice> StepRunner::choose_attention() {
  const ops::AttentionBackend requested = cfg_.attention_backend;
  std::vector<at::Device> devices;
  std::vector<std::future<ops::AttentionChoice>> futs;
  for (size_t i = 0; i < replicas_.size(); ++i) {
    const at::Device d = replicas_[i].device;
    if (std::find(devices.begin(), devices.end(), d) != devices.end()) continue;
    devices.push_back(d);
    const drafter::DrafterConfig& dcfg = dcfg_;
    const at::ScalarType compute = run_.compute;
    const drafter::DrafterAttentionUse use = run_attention_use(cfg_);
    futs.push_back(workers_[i]->submit([requested, &dcfg, d, compute, use] {
      return drafter::choose_drafter_attention(requested, dcfg, d, compute, use);
    }));
  }
  std::vector<ops::AttentionChoice> choices;
  std::exception_ptr err;
  for (auto& f : futs) {  // wait for every check before rethrowing
    try {
      choices.push_back(f.get());
    } catch (...) {
      if (!err) err = std::current_exception();
    }
  }
  if (err) std::rethrow_exception(err);
  for (size_t i = 0; i < devices.size(); ++i)
    for (auto& r : replicas_)
      if (r.device == devices[i]) r.attention = choices[i].backend;
  return choices;
}

std::optional<ops::LossCheckResult> StepRunner::check_loss_kernel() {
  const bool kernel_dtype = run_.compute == at::kFloat || run_.compute == at::kBFloat16;
  if (!loss_.chunk.fused_ce || loss_.chunk.kl_weight != 0.0 || !kernel_dtype) return std::nullopt;
  for (size_t i = 0; i < replicas_.size(); ++i) {
    if (!replicas_[i].device.is_cpu()) continue;
    ops::LossCheckSpec spec;
    spec.dtype = run_.compute;
    spec.hidden = dcfg_.hidden_size;
    spec.vocab = ops::loss_check_vocab(replicas_[i].frozen.lm_head.size(0));
    spec.seed = uint64_t(cfg_.seed);
    ops::LossCheckResult r = workers_[i]->submit([spec] { return ops::check_fused_cross_entropy(spec); }).get();
    if (!r.passed) {  // every worker: the flags are shared
      loss_.chunk.fused_ce = false;
      family_.use_generic_loss_kernels(loss_);
    }
    return r;
  }
  return std::nullopt;
}

StepRunner::WorkerOut StepRunner::run_worker(int index, const std::vector<const MicroBatch*>& micro) {
  Replica& r = replicas_[size_t(index)];
  if (hooks_.fail_worker == index)
    throw std::runtime_error("worker " + std::to_string(index) + " (" + r.device.str() + "): test failure");
  WorkerOut out;
  out.slot_correct = at::zeros({dcfg_.block_size}, at::kDouble);
  out.slot_count = at::zeros({dcfg_.block_size}, at::kDouble);
  for (const MicroBatch* mb : micro) {
    auto dev = [&](const at::Tensor& t) { return t.defined() ? t.to(r.device) : t; };
    const drafter::AnchorSample anchors{dev(mb->anchors.anchors), dev(mb->anchors.keep), dev(mb->anchors.doc_start),
                                        dev(mb->anchors.ctx_start)};
    drafter::BlockBatch blocks{dev(mb->blocks.block_ids), dev(mb->blocks.labels), dev(mb->blocks.weights),
                               dev(mb->blocks.teacher_index)};
    if (draft_table_.defined()) {  // loss over the draft vocabulary: other targets leave the loss, counted
      const RestrictedLabels rl = restrict_labels(mb->blocks.labels, mb->blocks.weights, draft_table_);
      blocks.labels = dev(rl.labels);
      blocks.weights = dev(rl.weights);
      out.out_of_vocab += double(rl.out_of_vocab.sum().item<int64_t>());
      out.label_rows += double(mb->blocks.weights.gt(0).sum().item<int64_t>());
    }
    const at::Tensor feats = mb->features.to(r.device, run_.compute);
    const at::Tensor last = mb->last_hidden.defined() ? mb->last_hidden.to(r.device, run_.compute) : at::Tensor();
    drafter::DrafterLossOptions opt = loss_;
    opt.attention = r.attention;
    auto res = drafter::drafter_loss(dcfg_, r.w, r.frozen, feats, last, anchors, blocks, opt, checkpointing_);
    // Unnormalised sum(w * loss_row): the step divides by the global weight after the all-reduce. The weight is
    // the one the loss divided by (after a draft vocabulary's restriction), so no term stays normalised per
    // micro-batch and the step trains the same loss however it is split (DSpark's epsilon is added once, later).
    const double weight = res.loss_weight.item<double>();
    const at::Tensor loss_sum = res.loss * (weight + res.loss_eps);
    loss_sum.backward();
    out.loss_sum += loss_sum.item<double>();
    out.weight += weight;
    out.slot_correct += res.slot_correct.to(at::kCPU, at::kDouble);
    out.slot_count += res.slot_count.to(at::kCPU, at::kDouble);
    const at::Tensor sums = family_.metric_sums(dcfg_, res);
    if (sums.defined()) out.family_sums = out.family_sums.defined() ? out.family_sums + sums : sums;
  }
  for (auto& p : r.params) {
    out.grads.push_back(p.grad().defined()
                            ? p.grad().to(run_.grad_device, run_.master_dtype)
                            : at::zeros(p.sizes(), at::TensorOptions(run_.master_dtype).device(run_.grad_device)));
    p.mutable_grad() = at::Tensor();
  }
  return out;
}

double StepRunner::busy_seconds() const {
  double sum = 0;
  for (double b : busy_) sum += b;
  return busy_.empty() ? 0.0 : sum / double(busy_.size());
}

StepOutcome StepRunner::step(const StepItem& item, int64_t step, int64_t total_steps, bool stop_here) {
  std::vector<std::future<WorkerOut>> futs;
  for (size_t wi = 0; wi < workers_.size(); ++wi) {
    std::vector<const MicroBatch*> mine;
    for (const auto& mb : item.micro)
      if (mb.worker == int(wi)) mine.push_back(&mb);
    futs.push_back(workers_[wi]->submit([this, wi, mine] {
      const auto t0 = std::chrono::steady_clock::now();
      WorkerOut out = run_worker(int(wi), mine);
      out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      return out;
    }));
  }
  std::vector<WorkerOut> outs;
  std::exception_ptr err;
  for (auto& f : futs) {  // wait for every worker before rethrowing, so none is left running
    try {
      outs.push_back(f.get());
    } catch (...) {
      if (!err) err = std::current_exception();
    }
  }
  if (err) std::rethrow_exception(err);
  busy_.resize(outs.size());
  for (size_t w = 0; w < outs.size(); ++w) busy_[w] += outs[w].seconds;

  // Sum gradients in worker order (deterministic) on the gradient device, then across processes.
  std::vector<at::Tensor> flat_parts;
  for (size_t i = 0; i < master_.params.size(); ++i) {
    at::Tensor g = outs[0].grads[i];
    for (size_t w = 1; w < outs.size(); ++w) g = g + outs[w].grads[i];
    flat_parts.push_back(g.reshape({-1}));
  }
  at::Tensor flat = at::cat(flat_parts);
  double local_weight = 0, local_tokens = 0;
  for (const auto& o : outs) local_weight += o.weight;
  for (const auto& mb : item.micro) local_tokens += double(mb.tokens);
  const int64_t B = dcfg_.block_size;
  const int64_t extra = 6 + 2 * B;  // the family's metric sums after the common statistics: one all-reduce
  const int64_t F = family_.metric_sums_size(dcfg_);  // the same in every process
  at::Tensor stats = at::zeros({extra + F}, at::kDouble);
  stats[0] = local_weight;
  for (const auto& o : outs) stats[1] += o.loss_sum;
  stats[2] = local_tokens;
  stats[3] = stop_here ? 1.0 : 0.0;
  for (const auto& o : outs) {
    stats.narrow(0, 4, B).add_(o.slot_correct);
    stats.narrow(0, 4 + B, B).add_(o.slot_count);
    stats[4 + 2 * B] += o.out_of_vocab;
    stats[5 + 2 * B] += o.label_rows;
    if (F > 0 && o.family_sums.defined()) stats.narrow(0, extra, F).add_(o.family_sums);
  }
  run_.coll->allreduce_sum(flat);
  run_.coll->allreduce_sum(stats);
  // A family's epsilon in the denominator (DSpark's, DeepSpec's 1e-6) is added once for the whole step.
  const double eps = family_.step_denominator_eps(loss_);
  const double total_weight = stats[0].item<double>() + eps;
  if (total_weight > 0) flat.div_(total_weight);
  std::vector<at::Tensor> grads;
  int64_t off = 0;
  for (const auto& p : master_.params) {
    grads.push_back(flat.narrow(0, off, p.numel()).view(p.sizes()));
    off += p.numel();
  }

  StepOutcome out;
  StepMetrics& m = out.metrics;
  m.step = step + 1;
  m.loss = total_weight > 0 ? stats[1].item<double>() / total_weight : 0.0;
  if (hooks_.keep_gradients)
    for (const auto& g : grads) out.gradients.push_back(g.clone());
  m.grad_norm = clip_grad_norm(grads, cfg_.clip);
  // Every process sees the same all-reduced loss and norm, so all of them stop here together, before the
  // master weights are touched.
  if (!std::isfinite(m.loss) || !std::isfinite(m.grad_norm)) throw DivergedError(m.step, m.loss, m.grad_norm);
  m.lr = cosine_lr(step, total_steps, cfg_.lr, cfg_.warmup_ratio, cfg_.min_lr_ratio);
  master_.adam->step(grads, m.lr);
  {
    at::NoGradGuard g;
    for (auto& r : replicas_)
      for (size_t i = 0; i < r.params.size(); ++i) r.params[i].copy_(master_.params[i]);
  }
  const at::Tensor correct = stats.narrow(0, 4, B), count = stats.narrow(0, 4 + B, B);
  const at::Tensor acc = correct / count.clamp_min(1.0);
  for (int64_t k = 0; k < B; ++k) m.slot_acc.push_back(acc[k].item<double>());
  const double c1 = correct.narrow(0, 1, B - 1).sum().item<double>(), n1 = count.narrow(0, 1, B - 1).sum().item<double>();
  m.acc = n1 > 0 ? c1 / n1 : 0.0;
  m.tokens = stats[2].item<double>();
  out.stop = stats[3].item<double>() > 0;
  if (F > 0) {
    drafter::FamilyStepMetrics fm = family_.step_metrics(dcfg_, stats.narrow(0, extra, F));
    m.family = std::move(fm.named);
    m.family_progress = std::move(fm.progress);
  }
  if (draft_table_.defined()) {
    const double rows = stats[5 + 2 * B].item<double>();
    m.out_of_vocab = rows > 0 ? stats[4 + 2 * B].item<double>() / rows : 0.0;
  }
  return out;
}

}  // namespace dflash::train
