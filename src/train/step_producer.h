// Prepares training steps ahead of the workers on its own thread: takes the next samples of the seeded
// epoch order, collates micro-batches, runs the target for online data (hidden states of the drafter's
// target layers + last hidden), samples anchors and builds the block batches. Items go through a bounded
// queue (back-pressure); any failure is rethrown to the consumer.
//
// Step s covers samples [pos, pos + G) of the endless sample stream (stream index p -> epoch p / N,
// permutation of epoch e seeded by (seed, e)), G = batch_size * grad_accum * workers * ranks. Micro-batch
// m (batch_size consecutive samples) belongs to global worker m % (workers * ranks): rank g / workers,
// local worker g % workers. Anchors of micro-batch m use an RNG seeded by (seed, s, m), so results do not
// depend on how the step is split, and a resumed run sees exactly the same batches.
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include <ATen/core/Tensor.h>

#include "block_batch.h"
#include "bounded_queue.h"
#include "drafter_config.h"
#include "sample_source.h"
#include "train_config.h"

namespace dflash::models {
class TargetModel;
}

namespace dflash::train {

struct MicroBatch {
  int64_t index = 0;   // m within the step
  int worker = 0;      // local worker
  at::Tensor input_ids, loss_mask, features, last_hidden;  // CPU: [b,S], [b,S], [b,S,nH], [b,S,H] or undefined
  std::vector<int64_t> lengths;  // real tokens of each sample (row i before packing)
  drafter::AnchorSample anchors;  // packed rows: with doc_start / ctx_start
  drafter::BlockBatch blocks;
  double weight = 0;   // sum of the loss weights of this micro-batch
  int64_t tokens = 0;  // real (unpadded) tokens
  int64_t positions = 0, block_slots = 0, kept_blocks = 0;  // rows x row length, rows x N, blocks with an anchor
};

struct StepItem {
  int64_t step = 0, pos_after = 0;
  std::vector<MicroBatch> micro;  // this rank's micro-batches, in m order
};

struct ProducerSettings {
  drafter::DrafterConfig dcfg;
  int64_t batch_size = 1, grad_accum = 1, workers = 1, rank = 0, world = 1;
  int64_t max_len = 4096, num_anchors = 512, seed = 0;
  // Sequence length quantum (<= max_len): a few distinct tensor shapes instead of one per sample length.
  // oneDNN's bf16 CPU path keeps state per GEMM shape, so resident memory grew with every new length.
  int64_t pad_multiple = 64;
  bool pack = false;  // several samples per row (sequence_packing.h)
  double gamma = 7;
  bool want_last_hidden = false;
  int64_t queue_depth = 2;
};

// The producer's settings for a run of `cfg` with `workers` local worker threads, as rank `rank` of `world`.
ProducerSettings producer_settings(const TrainConfig& cfg, const drafter::DrafterConfig& d, int64_t workers, int rank,
                                   int world);

class StepProducer {
 public:
  // `target` is used for sources without features (online); it must outlive the producer.
  StepProducer(ProducerSettings s, const SampleSource& source, const models::TargetModel* target,
               int64_t first_step, int64_t last_step, int64_t start_pos);
  ~StepProducer();  // stops and joins
  // Next step (rethrows producer errors); nullopt after the last step.
  std::optional<StepItem> next() { return queue_.pop(); }
  void stop();

  int64_t samples_per_step() const;

 private:
  void run();
  StepItem make_step(int64_t step, int64_t pos);
  MicroBatch make_micro(int64_t step, int64_t m, int64_t first_sample);
  int64_t sample_at(int64_t stream_pos);

  ProducerSettings s_;
  const SampleSource& source_;
  const models::TargetModel* target_;
  int64_t first_step_, last_step_, start_pos_;
  int64_t perm_epoch_ = -1;
  std::vector<int64_t> perm_;
  BoundedQueue<StepItem> queue_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// Pads samples to the longest (input 0, loss_mask false, features 0) after truncating to max_len, then to
// a multiple of pad_multiple (never past max_len). Padding is never an anchor, never a label with weight
// and never visible to a query (queries see context before their anchor), so the loss is unchanged.
MicroBatch collate(const std::vector<Sample>& samples, int64_t max_len, int64_t pad_multiple = 1);

// The micro-batch's rows packed (sequence_packing.h: at most max_len tokens and num_anchors anchors a row);
// sets mb.anchors.doc_start, for sample_anchors. Anchors and blocks are not built yet.
void pack_micro_batch(MicroBatch& mb, int64_t max_len, int64_t num_anchors, int64_t pad_multiple);

}  // namespace dflash::train
