// `dflash drafter selftest` (internal, for tests): runs one training forward + backward of the drafter on a
// batch read from safetensors, with the objective of the config's family as `dflash train` builds it (DFlash:
// same-position blocks and the chunked CE; DSpark: next-token blocks, decay exp(-j/4) by default, DeepSpec's
// objective with its default weights; DFlash2: DFlash's blocks, the unary CE plus alpha x the selector's CE with the
// config's top-K), and writes everything a reference needs to compare against.
//
// batch file: target_features [b,S,n*H], input_ids [b,S], loss_mask [b,S], anchors [b,N], keep [b,N],
// embed [V,H], optional lm_head [V,H] (else the embedding, which requires tie_word_embeddings),
// optional target_last_hidden [b,S,H] (needed when --kl-weight > 0, and by DSpark: its teacher).
// out file: hidden, logits, loss, labels, weights, slot_{correct,count,weight}, grad.<param name>; DFlash2 also
// selector_loss (L_sel), DSpark stats (dspark_loss.h's sums).
#include <cstdio>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "args.h"
#include "atomic_output.h"
#include "compute_settings.h"
#include "drafter_commands.h"
#include "drafter_model.h"
#include "family_model.h"
#include "family_training.h"
#include "family_registry.h"
#include "loss_weighting.h"
#include "safetensors.h"

namespace dflash::drafter {

using util::Args;

int selftest_main(const std::vector<std::string>& argv) {
  Args a("drafter selftest", "one drafter forward+backward on a saved batch; writes outputs and gradients");
  a.option("config", "FILE", "", "drafter config.json");
  a.option("weights", "FILE", "", "drafter model.safetensors");
  a.option("batch", "FILE", "", "batch safetensors (see the source header)");
  a.option("out", "FILE", "", "output safetensors");
  a.option("dtype", "DTYPE", "float64", "compute dtype");
  a.option("activation-checkpoint", "POLICY", "none", "none | layer | every:K (train's activation_checkpoint)");
  a.option("kl-weight", "X", "0", "soft-label weight");
  a.option("gamma", "X", "0", "loss decay exp(-(k-1)/gamma) (0: by block size)");
  a.option("loss-decay", "NAME", "exp", "exp: decay by --gamma | none: every block slot weighs 1");
  a.option("chunk-rows", "N", "7", "loss chunk rows");
  a.option("selector-candidates", "NAME", "strict", "dflash2: strict | inject (the train setting selector_candidates)");
  a.option("selector-loss-weight", "X", "1", "dflash2: alpha in L = L_unary + alpha L_selector");
  a.range("kl-weight", util::closed(0, 1)).range("gamma", util::closed(0, 1e4), " (0: by block size)");
  a.range("chunk-rows", 1, 16777216).range("selector-loss-weight", util::closed(0, 1e6));
  if (!a.parse(argv)) return 0;
  if (a.given("out")) io::check_output_path(a.str("out"), "drafter selftest: --out");  // before any work
  for (const char* req : {"config", "weights", "batch", "out"})
    if (a.str(req).empty()) throw std::invalid_argument(std::string("drafter selftest: --") + req + " is required");

  using namespace dflash::drafter;
  const auto dtype = ops::parse_dtype(a.str("dtype"), "drafter selftest: --dtype");
  const DrafterConfig cfg = load_drafter_config(a.str("config"));
  DrafterWeights w = load_drafter_weights(cfg, a.str("weights"), dtype);
  w.set_requires_grad(true);
  const auto batch = io::SafetensorsFile::open(a.str("batch"));
  FrozenTarget t;
  t.embed = batch.load("embed").to(dtype);
  if (batch.contains("lm_head")) {
    t.lm_head = batch.load("lm_head").to(dtype);
  } else {
    if (!cfg.tie_word_embeddings)
      throw std::invalid_argument(a.str("batch") + ": no lm_head and the config does not tie word embeddings");
    t.lm_head = t.embed;
  }
  const at::Tensor ids = batch.load("input_ids").to(at::kLong);
  const at::Tensor loss_mask = batch.load("loss_mask").to(at::kBool);
  const AnchorSample anchors{batch.load("anchors").to(at::kLong), batch.load("keep").to(at::kBool)};
  const at::Tensor feats = batch.load("target_features").to(dtype);
  const at::Tensor last = batch.contains("target_last_hidden") ? batch.load("target_last_hidden").to(dtype) : at::Tensor();

  DrafterLossOptions opt;
  const auto decay = loss_decay_from_text(a.str("loss-decay"));
  if (!decay) throw util::UsageError("drafter selftest: --loss-decay: expected exp or none, got '" + a.str("loss-decay") + "'");
  if (*decay == LossDecay::None && a.f64("gamma") != 0)
    throw util::UsageError("drafter selftest: --gamma is not used with --loss-decay none (no decay, no gamma)");
  // The family's objective as train builds it: its loss decay and blocks (family_training.h), the flags it takes
  // (family_model.h).
  const FamilyModel& family = model_of(cfg);
  const FamilyTraining& training = family_training(cfg);
  const double gamma = a.f64("gamma") == 0 ? training.unset_gamma() : a.f64("gamma");
  opt.gamma = loss_gamma(gamma, *decay, cfg.block_size);
  opt.chunk.kl_weight = a.f64("kl-weight");
  opt.chunk.chunk_rows = a.i64("chunk-rows");
  family.check_selftest(opt, last.defined(), a.str("batch"));
  opt.dspark.chunk_rows = opt.chunk.chunk_rows;
  const auto candidates = selector_candidates_from_text(a.str("selector-candidates"));
  if (!candidates)
    throw util::UsageError("drafter selftest: --selector-candidates: expected strict or inject, got '" +
                           a.str("selector-candidates") + "'");
  if (!family.takes_selector_options() && (a.given("selector-candidates") || a.given("selector-loss-weight"))) {
    std::string takers;  // the families whose objective has a selector, as the message names them
    for (const Family* f : registered_families())
      if (const FamilyModel* m = find_family_model(*f); m && m->takes_selector_options())
        takers += std::string(takers.empty() ? "" : " or ") + f->display_name();
    throw util::UsageError("drafter selftest: --selector-candidates and --selector-loss-weight are for a " + takers +
                           " drafter, the config is " + std::string(cfg.family.name()));
  }
  training.add_drafter_loss_options(cfg, opt);  // DFlash2's selector top-K
  opt.dflash2.selector.candidates = *candidates;
  opt.dflash2.selector_weight = a.f64("selector-loss-weight");
  const BlockBatch blocks = training.build_blocks(cfg, ids, loss_mask, anchors, opt.gamma);
  const auto r = drafter_loss(cfg, w, t, feats, last, anchors, blocks, opt,
                              CheckpointPolicy::parse(a.str("activation-checkpoint")));
  r.loss.backward();

  std::vector<std::pair<std::string, at::Tensor>> out = {
      {"hidden", r.hidden.detach()},
      {"logits", at::matmul(r.hidden.detach(), t.lm_head.t())},
      {"loss", r.loss.detach().reshape({1})},
      {"block_ids", blocks.block_ids},
      {"labels", blocks.labels},
      {"weights", blocks.weights},
      {"slot_correct", r.slot_correct},
      {"slot_count", r.slot_count},
      {"slot_weight", r.slot_weight}};
  if (r.dflash2.defined()) out.emplace_back("selector_loss", r.dflash2.selector_loss.detach().reshape({1}));
  if (r.family_stats.defined()) out.emplace_back("stats", r.family_stats);
  for (auto& [name, p] : w.named())
    out.emplace_back("grad." + name, p.grad().defined() ? p.grad() : at::zeros_like(p));
  io::save_safetensors(a.str("out"), out);
  std::printf("loss %.10g\n", r.loss.item<double>());
  return 0;
}

}  // namespace dflash::drafter
