#include "step_producer.h"

#include <algorithm>
#include <numeric>
#include <random>
#include <stdexcept>

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include "compute_settings.h"
#include "drafter_model.h"
#include "family_registry.h"
#include "family_cost.h"
#include "family_training.h"
#include "sequence_packing.h"
#include "target_model.h"

namespace dflash::train {

drafter::DrafterLossOptions run_loss_options(const TrainConfig& cfg, const drafter::DrafterConfig& d) {
  const drafter::FamilyTraining& family = drafter::family_training(d);
  drafter::DrafterLossOptions o;
  o.gamma = drafter::loss_gamma(cfg.gamma > 0 ? cfg.gamma : family.unset_gamma(), cfg.loss_decay, d.block_size);
  o.chunk.chunk_rows = cfg.loss_chunk_rows;
  o.chunk.kl_weight = cfg.kl_weight;
  family.add_loss_options(to_json(cfg), d, o);  // the family's own terms (DSpark's weights, DFlash2's selector)
  return o;
}

ProducerSettings producer_settings(const TrainConfig& cfg, const drafter::DrafterConfig& d, int64_t workers, int rank,
                                   int world, int64_t replicas, int64_t stages) {
  return producer_settings(cfg, d, run_loss_options(cfg, d).gamma, workers, rank, world, replicas, stages);
}

ProducerSettings producer_settings(const TrainConfig& cfg, const drafter::DrafterConfig& d, double gamma,
                                   int64_t workers, int rank, int world, int64_t replicas, int64_t stages) {
  ProducerSettings ps;
  ps.dcfg = d;
  ps.batch_size = cfg.batch_size;
  ps.grad_accum = cfg.grad_accum;
  ps.workers = workers;
  ps.rank = rank;
  ps.world = world;
  ps.max_len = cfg.max_len;
  ps.num_anchors = cfg.num_anchors;
  ps.seed = cfg.seed;
  ps.pack = cfg.pack;
  ps.gamma = gamma;
  ps.want_last_hidden = cfg.kl_weight > 0 || drafter::family_cost(d).needs_last_hidden(d);
  ps.queue_depth = cfg.queue_depth;
  // As the workers: `threads` each, else the machine's cores shared among the threads that compute at once.
  ps.threads = cfg.threads > 0 ? cfg.threads
                               : std::max<int64_t>(1, ops::resolve_threads(0, "") / std::max<int64_t>(1, replicas * stages));
  return ps;
}
namespace {

// splitmix64: decorrelates seeds built from (seed, step, index).
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace

MicroBatch collate(const std::vector<Sample>& samples, int64_t max_len, int64_t pad_multiple) {
  MicroBatch mb;
  const int64_t b = int64_t(samples.size());
  int64_t S = 0;
  for (const auto& s : samples) S = std::max(S, std::min(max_len, s.input_ids.size(0)));
  if (pad_multiple > 1) S = std::max(S, std::min(max_len, (S + pad_multiple - 1) / pad_multiple * pad_multiple));
  mb.input_ids = at::zeros({b, S}, at::kLong);
  mb.loss_mask = at::zeros({b, S}, at::kBool);
  const bool feats = samples.front().features.defined();
  const bool last = feats && std::all_of(samples.begin(), samples.end(), [](const Sample& s) { return s.last_hidden.defined(); });
  if (feats) mb.features = at::zeros({b, S, samples.front().features.size(1)}, samples.front().features.options());
  if (last) mb.last_hidden = at::zeros({b, S, samples.front().last_hidden.size(1)}, samples.front().last_hidden.options());
  for (int64_t i = 0; i < b; ++i) {
    const auto& s = samples[size_t(i)];
    const int64_t n = std::min(max_len, s.input_ids.size(0));
    mb.input_ids[i].narrow(0, 0, n).copy_(s.input_ids.narrow(0, 0, n));
    mb.loss_mask[i].narrow(0, 0, n).copy_(s.loss_mask.narrow(0, 0, n));
    if (feats) {
      if (s.features.size(1) != mb.features.size(2))
        throw std::invalid_argument("data: samples of one micro-batch have different feature sizes");
      mb.features[i].narrow(0, 0, n).copy_(s.features.narrow(0, 0, n));
    }
    if (last) mb.last_hidden[i].narrow(0, 0, n).copy_(s.last_hidden.narrow(0, 0, n));
    mb.tokens += n;
    mb.lengths.push_back(n);
  }
  return mb;
}

void pack_micro_batch(MicroBatch& mb, int64_t max_len, int64_t num_anchors, int64_t pad_multiple) {
  PackedRows p = pack_rows(mb.input_ids, mb.loss_mask, mb.features, mb.last_hidden, mb.lengths, max_len, num_anchors,
                           pad_multiple);
  mb.input_ids = p.input_ids;
  mb.loss_mask = p.loss_mask;
  mb.features = p.features;
  mb.last_hidden = p.last_hidden;
  mb.anchors.doc_start = p.doc_start;
}

StepProducer::StepProducer(ProducerSettings s, const SampleSource& source,
                           std::vector<const models::TargetModel*> targets, int64_t first_step, int64_t last_step,
                           int64_t start_pos)
    : s_(std::move(s)), source_(source), training_(&drafter::family_training(s_.dcfg)), first_step_(first_step),
      last_step_(last_step), start_pos_(start_pos), next_step_(first_step) {
  if (!source_.has_features()) {
    if (targets.empty()) throw std::invalid_argument("online data needs the target model");
    targets_ = std::move(targets);
  }
  for (const auto* t : targets_)
    if (!t || t->stages().size() != targets_.front()->stages().size())
      throw std::invalid_argument("producer: every target replica needs the same number of pipeline stages");
  const int64_t lanes = std::max<size_t>(1, targets_.size());
  stage_threads_ = !targets_.empty() && s_.pipeline ? int64_t(targets_.front()->stages().size()) : 1;
  micro_per_step_ = s_.grad_accum * s_.workers;
  orders_.resize(size_t(lanes));
  const int64_t count = std::max<int64_t>(0, last_step_ - first_step_) * micro_per_step_;
  // queue_depth steps ahead in all, shared by the replicas (at least one micro-batch each)
  const size_t depth = size_t(std::max<int64_t>(1, (s_.queue_depth * micro_per_step_ + lanes - 1) / lanes));
  const int64_t threads = s_.threads;
  lanes_ = std::make_unique<util::OrderedLanes<Job>>(
      int(lanes), int(stage_threads_), count, depth,
      [this](int lane, int stage, int64_t k, Job& job) { run_stage(lane, stage, k, job); },
      [threads](int, int) { ops::set_thread_local_threads(threads); });
}

StepProducer::~StepProducer() { stop(); }

void StepProducer::stop() { lanes_->stop(); }

int64_t StepProducer::samples_per_step() const { return s_.batch_size * s_.grad_accum * s_.workers * s_.world; }

double StepProducer::busy_seconds() const {
  double sum = 0;
  for (int r = 0; r < lanes_->lanes(); ++r) {
    double busiest = 0;
    for (int st = 0; st < lanes_->stages(); ++st) busiest = std::max(busiest, lanes_->busy_seconds(r, st));
    sum += busiest;
  }
  return sum / lanes_->lanes();
}

std::optional<StepItem> StepProducer::next() {
  if (next_step_ >= last_step_) return std::nullopt;
  StepItem item;
  item.step = next_step_;
  for (int64_t j = 0; j < micro_per_step_; ++j) {
    auto job = lanes_->next();
    if (!job) return std::nullopt;
    item.micro.push_back(std::move(job->mb));
  }
  item.pos_after = start_pos_ + (next_step_ + 1 - first_step_) * samples_per_step();
  ++next_step_;
  return item;
}

int64_t StepProducer::sample_at(int lane, int64_t p) {
  const int64_t n = source_.size();
  const int64_t epoch = p / n;
  EpochOrder& o = orders_[size_t(lane)];
  if (epoch != o.epoch) {
    o.perm.resize(size_t(n));
    std::iota(o.perm.begin(), o.perm.end(), 0);
    std::mt19937_64 rng(mix(uint64_t(s_.seed) * 1000003ULL + uint64_t(epoch)));
    // Fisher-Yates written out: std::shuffle's sequence is implementation-defined.
    for (int64_t i = n - 1; i > 0; --i) std::swap(o.perm[size_t(i)], o.perm[size_t(rng() % uint64_t(i + 1))]);
    o.epoch = epoch;
  }
  return o.perm[size_t(p % n)];
}

void StepProducer::run_stage(int lane, int stage, int64_t k, Job& job) {
  at::NoGradGuard no_grad;  // grad mode is per thread: the target never needs a graph
  if (stage == 0) start_micro(lane, k, job);
  if (!targets_.empty()) {
    const models::TargetModel& t = *targets_[size_t(lane)];
    if (stage_threads_ > 1) {
      t.forward_stage(size_t(stage), job.fwd);
    } else {
      for (size_t st = 0; st < t.stages().size(); ++st) t.forward_stage(st, job.fwd);
    }
  }
  if (stage == stage_threads_ - 1) finish_micro(k, job);
}

// This rank's k-th micro-batch is micro-batch m of step first_step + k / (grad_accum x workers): the j-th
// (j = k mod that) of the step's m whose global worker m % (workers x world) belongs to this rank.
void StepProducer::start_micro(int lane, int64_t k, Job& job) {
  const int64_t step = first_step_ + k / micro_per_step_, j = k % micro_per_step_;
  const int64_t groups = s_.workers * s_.world;
  const int64_t m = (j / s_.workers) * groups + s_.rank * s_.workers + j % s_.workers;
  const int64_t first_sample = start_pos_ + (step - first_step_) * samples_per_step() + m * s_.batch_size;
  std::vector<Sample> samples;
  {
    std::lock_guard<std::mutex> l(source_mutex_);
    for (int64_t i = 0; i < s_.batch_size; ++i) samples.push_back(source_.get(sample_at(lane, first_sample + i)));
  }
  MicroBatch& mb = job.mb;
  mb = collate(samples, s_.max_len, s_.pad_multiple);
  mb.index = m;
  mb.worker = int(m % s_.workers);
  const auto& c = s_.dcfg;
  if (mb.features.defined()) {
    if (mb.features.size(2) != int64_t(c.target_layer_ids.size()) * c.hidden_size)
      throw std::invalid_argument("data: samples have " + std::to_string(mb.features.size(2)) +
                                  " hidden-state features, the drafter expects " +
                                  std::to_string(c.target_layer_ids.size()) + " target layers x hidden " +
                                  std::to_string(c.hidden_size));
    return;
  }
  // online: the target computes the context features, stage by stage
  std::vector<int> capture(c.target_layer_ids.begin(), c.target_layer_ids.end());
  job.fwd = targets_[size_t(lane)]->begin_forward(mb.input_ids, nullptr, capture, false, s_.want_last_hidden);
}

void StepProducer::finish_micro(int64_t k, Job& job) {
  MicroBatch& mb = job.mb;
  const auto& c = s_.dcfg;
  if (!targets_.empty()) {
    std::vector<at::Tensor> parts;
    for (int64_t id : c.target_layer_ids) parts.push_back(job.fwd.out.hidden.at(int(id)).to(at::kCPU));
    mb.features = at::cat(parts, -1);
    if (s_.want_last_hidden) mb.last_hidden = job.fwd.out.last_hidden.to(at::kCPU);
    job.fwd = {};  // the activations go now, not when the micro-batch is consumed
  }
  if (s_.want_last_hidden && !mb.last_hidden.defined()) {
    const std::string use = drafter::family_cost(c).needs_last_hidden(c) ? drafter::family_cost(c).teacher_label() : "";
    throw std::invalid_argument(!use.empty() ? "data: drafter_family " + std::string(drafter::family_of(c.family).name()) +
                                                   " needs the target's last hidden states (" + use +
                                                   "), which the samples lack: dump them with `dflash data dump-hidden "
                                                   "--last-hidden` or train online"
                                             : "data: kl_weight > 0 needs the target's last hidden states, which the "
                                               "samples lack");
  }
  if (s_.pack) pack_micro_batch(mb, s_.max_len, s_.num_anchors, s_.pad_multiple);  // after the online target: per-sample rows
  const int64_t step = first_step_ + k / micro_per_step_;
  std::mt19937_64 rng(mix(mix(uint64_t(s_.seed)) ^ mix(uint64_t(step) * 7919ULL + uint64_t(mb.index))));
  mb.anchors = drafter::sample_anchors(mb.loss_mask, s_.num_anchors, rng, mb.anchors.doc_start);
  mb.blocks = training_->build_blocks(c, mb.input_ids, mb.loss_mask, mb.anchors, s_.gamma);
  mb.weight = mb.blocks.weights.sum().item<double>();
  mb.positions = mb.input_ids.numel();
  mb.block_slots = mb.anchors.keep.numel();
  mb.kept_blocks = mb.anchors.keep.sum().item<int64_t>();
}

}  // namespace dflash::train
