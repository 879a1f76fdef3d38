// Prepares training steps ahead of the workers on its own threads: takes the next samples of the seeded
// epoch order, collates micro-batches, runs the target for online data (hidden states of the drafter's
// target layers + last hidden), samples anchors and builds the block batches. Items wait in bounded queues
// (back-pressure); any failure is rethrown to the consumer.
//
// Online data with R target replicas (target_devices "a;b;c"): this rank's k-th micro-batch is made by replica
// k % R, each replica on its own thread(s), and the micro-batches are consumed in k order
// (util/ordered_lanes.h). A replica of P pipeline stages runs a thread per stage, so up to P micro-batches are
// in flight in it, one per stage. Since a micro-batch depends only on (step, m), the steps are the same bits
// for any R and P (with equal intra-op threads per thread: a CPU GEMM's rounding may depend on its thread count).
//
// Step s covers samples [pos, pos + G) of the endless sample stream (stream index p -> epoch p / N,
// permutation of epoch e seeded by (seed, e)), G = batch_size * grad_accum * workers * ranks. Micro-batch
// m (batch_size consecutive samples) belongs to global worker m % (workers * ranks): rank g / workers,
// local worker g % workers. Anchors of micro-batch m use an RNG seeded by (seed, s, m), so results do not
// depend on how the step is split, and a resumed run sees exactly the same batches.
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include <ATen/core/Tensor.h>

#include "block_batch.h"
#include "drafter_config.h"
#include "drafter_model.h"
#include "family_training.h"
#include "ordered_lanes.h"
#include "sample_source.h"
#include "target_model.h"
#include "train_config.h"

namespace dflash::train {

// The samples the producer collates come from the data layer's readers (sample_source.h).
using data::Sample;
using data::SampleSource;

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
  int64_t queue_depth = 2;     // prepared steps buffered ahead of the workers (split over the replicas)
  int64_t threads = 1;         // intra-op threads of each producer thread (each replica's stage thread)
  bool pipeline = true;        // a thread per pipeline stage; false: a replica runs its stages in turn (bench)
};

// The producer's settings for a run of `cfg` with `workers` local worker threads, as rank `rank` of `world`, whose
// target has `replicas` x `stages` (online) threads computing at once.
ProducerSettings producer_settings(const TrainConfig& cfg, const drafter::DrafterConfig& d, int64_t workers, int rank,
                                   int world, int64_t replicas = 1, int64_t stages = 1);
// The same with the loss's gamma as the run resolved it already (StepRunner::loss_options), not resolved again.
ProducerSettings producer_settings(const TrainConfig& cfg, const drafter::DrafterConfig& d, double gamma,
                                   int64_t workers, int rank, int world, int64_t replicas, int64_t stages);

class StepProducer {
 public:
  // `targets`: the target's replicas, used for sources without features (online); they must outlive the
  // producer. Offline data needs none and is read by one thread.
  StepProducer(ProducerSettings s, const SampleSource& source, std::vector<const models::TargetModel*> targets,
               int64_t first_step, int64_t last_step, int64_t start_pos);
  ~StepProducer();  // stops and joins
  // Next step (rethrows producer errors); nullopt after the last step.
  std::optional<StepItem> next();
  void stop();

  int64_t samples_per_step() const;
  int64_t replicas() const { return lanes_->lanes(); }
  // Seconds the producer has computed so far: per replica the busiest of its threads (a pipeline runs as fast
  // as its slowest stage), averaged over the replicas. Divided by the wall time: the producer's busy fraction.
  double busy_seconds() const;

 private:
  struct Job {
    MicroBatch mb;
    models::StagedForward fwd;  // online, between pipeline stages
  };
  // Stage `stage` of this rank's k-th micro-batch on replica `lane`.
  void run_stage(int lane, int stage, int64_t k, Job& job);
  void start_micro(int lane, int64_t k, Job& job);  // samples, collate, (online) start the target forward
  void finish_micro(int64_t k, Job& job);           // features to the CPU, packing, anchors, blocks
  int64_t sample_at(int lane, int64_t stream_pos);

  ProducerSettings s_;
  const SampleSource& source_;
  const drafter::FamilyTraining* training_;  // the family's blocks and last-hidden rule (family_training.h)
  std::vector<const models::TargetModel*> targets_;
  int64_t first_step_, last_step_, start_pos_;
  int64_t micro_per_step_;  // this rank's micro-batches per step
  int64_t stage_threads_;   // threads per replica
  struct EpochOrder {       // the permutation of the epoch last asked for, per replica (no sharing)
    int64_t epoch = -1;
    std::vector<int64_t> perm;
  };
  std::vector<EpochOrder> orders_;
  std::mutex source_mutex_;  // sample sources are read by one thread at a time
  std::unique_ptr<util::OrderedLanes<Job>> lanes_;
  int64_t next_step_;
};

// The loss a run trains with, resolved once from its settings and the drafter config (loss_weighting.h): gamma
// from loss_decay and gamma (by block size when 0), loss chunk rows and kl_weight. The workers' loss and the
// producer's block weights both take it from here.
drafter::DrafterLossOptions run_loss_options(const TrainConfig& cfg, const drafter::DrafterConfig& d);

// Pads samples to the longest (input 0, loss_mask false, features 0) after truncating to max_len, then to
// a multiple of pad_multiple (never past max_len). Padding is never an anchor, never a label with weight
// and never visible to a query (queries see context before their anchor), so the loss is unchanged.
MicroBatch collate(const std::vector<Sample>& samples, int64_t max_len, int64_t pad_multiple = 1);

// The micro-batch's rows packed (sequence_packing.h: at most max_len tokens and num_anchors anchors a row);
// sets mb.anchors.doc_start, for sample_anchors. Anchors and blocks are not built yet.
void pack_micro_batch(MicroBatch& mb, int64_t max_len, int64_t num_anchors, int64_t pad_multiple);

}  // namespace dflash::train
