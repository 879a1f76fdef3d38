#include "step_producer.h"

#include <algorithm>
#include <numeric>
#include <random>
#include <stdexcept>

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include "drafter_model.h"
#include "sequence_packing.h"
#include "target_model.h"

namespace dflash::train {

ProducerSettings producer_settings(const TrainConfig& cfg, const drafter::DrafterConfig& d, int64_t workers, int rank,
                                   int world) {
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
  ps.gamma = drafter::loss_gamma(cfg.gamma, cfg.loss_decay != "none", d.block_size);
  ps.want_last_hidden = cfg.kl_weight > 0;
  ps.queue_depth = cfg.queue_depth;
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

StepProducer::StepProducer(ProducerSettings s, const SampleSource& source, const models::TargetModel* target,
                           int64_t first_step, int64_t last_step, int64_t start_pos)
    : s_(std::move(s)), source_(source), target_(target), first_step_(first_step), last_step_(last_step),
      start_pos_(start_pos), queue_(size_t(s_.queue_depth)) {
  if (!source_.has_features() && !target_)
    throw std::invalid_argument("online data needs the target model");
  thread_ = std::thread([this] { run(); });
}

StepProducer::~StepProducer() { stop(); }

void StepProducer::stop() {
  stop_ = true;
  queue_.close();
  if (thread_.joinable()) thread_.join();
}

int64_t StepProducer::samples_per_step() const { return s_.batch_size * s_.grad_accum * s_.workers * s_.world; }

int64_t StepProducer::sample_at(int64_t p) {
  const int64_t n = source_.size();
  const int64_t epoch = p / n;
  if (epoch != perm_epoch_) {
    perm_.resize(size_t(n));
    std::iota(perm_.begin(), perm_.end(), 0);
    std::mt19937_64 rng(mix(uint64_t(s_.seed) * 1000003ULL + uint64_t(epoch)));
    // Fisher-Yates written out: std::shuffle's sequence is implementation-defined.
    for (int64_t i = n - 1; i > 0; --i) std::swap(perm_[size_t(i)], perm_[size_t(rng() % uint64_t(i + 1))]);
    perm_epoch_ = epoch;
  }
  return perm_[size_t(p % n)];
}

MicroBatch StepProducer::make_micro(int64_t step, int64_t m, int64_t first_sample) {
  std::vector<Sample> samples;
  for (int64_t j = 0; j < s_.batch_size; ++j) samples.push_back(source_.get(sample_at(first_sample + j)));
  MicroBatch mb = collate(samples, s_.max_len, s_.pad_multiple);
  mb.index = m;
  mb.worker = int(m % s_.workers);
  const auto& c = s_.dcfg;
  if (!mb.features.defined()) {  // online: the target computes the context features now
    std::vector<int> capture(c.target_layer_ids.begin(), c.target_layer_ids.end());
    const auto out = target_->forward(mb.input_ids, nullptr, capture, false, s_.want_last_hidden);
    std::vector<at::Tensor> parts;
    for (int id : capture) parts.push_back(out.hidden.at(id).to(at::kCPU));
    mb.features = at::cat(parts, -1);
    if (s_.want_last_hidden) mb.last_hidden = out.last_hidden.to(at::kCPU);
  } else if (mb.features.size(2) != int64_t(c.target_layer_ids.size()) * c.hidden_size) {
    throw std::invalid_argument("data: samples have " + std::to_string(mb.features.size(2)) +
                                " hidden-state features, the drafter expects " +
                                std::to_string(c.target_layer_ids.size()) + " target layers x hidden " +
                                std::to_string(c.hidden_size));
  }
  if (s_.want_last_hidden && !mb.last_hidden.defined())
    throw std::invalid_argument("data: kl_weight > 0 needs the target's last hidden states, which the samples lack");
  if (s_.pack) pack_micro_batch(mb, s_.max_len, s_.num_anchors, s_.pad_multiple);  // after the online target: per-sample rows
  std::mt19937_64 rng(mix(mix(uint64_t(s_.seed)) ^ mix(uint64_t(step) * 7919ULL + uint64_t(m))));
  mb.anchors = drafter::sample_anchors(mb.loss_mask, s_.num_anchors, rng, mb.anchors.doc_start);
  mb.blocks = drafter::build_block_batch(mb.input_ids, mb.loss_mask, mb.anchors, c.block_size, c.mask_token_id, s_.gamma);
  mb.weight = mb.blocks.weights.sum().item<double>();
  mb.positions = mb.input_ids.numel();
  mb.block_slots = mb.anchors.keep.numel();
  mb.kept_blocks = mb.anchors.keep.sum().item<int64_t>();
  return mb;
}

StepItem StepProducer::make_step(int64_t step, int64_t pos) {
  StepItem item;
  item.step = step;
  const int64_t groups = s_.workers * s_.world;
  const int64_t M = s_.grad_accum * groups;
  for (int64_t m = 0; m < M && !stop_; ++m) {
    if ((m % groups) / s_.workers != s_.rank) continue;
    item.micro.push_back(make_micro(step, m, pos + m * s_.batch_size));
  }
  item.pos_after = pos + samples_per_step();
  return item;
}

void StepProducer::run() {
  at::NoGradGuard no_grad;  // grad mode is per thread: the target never needs a graph
  try {
    int64_t pos = start_pos_;
    for (int64_t step = first_step_; step < last_step_ && !stop_; ++step) {
      StepItem item = make_step(step, pos);
      pos = item.pos_after;
      if (stop_ || !queue_.push(std::move(item))) return;
    }
    queue_.close();
  } catch (...) {
    queue_.fail(std::current_exception());
  }
}

}  // namespace dflash::train
