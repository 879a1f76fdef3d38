// dspark_probe: runs the DSpark heads on tensors from a safetensors file and writes their outputs and gradients,
// for tests/python/test_dspark_heads.py to compare against tests/python/family_reference.py. A test tool, not a
// dflash command.
//
//   dspark_probe heads IN OUT rank=R type=vanilla|gated|rnn confidence=0|1 with_markov=0|1
//       IN: hidden [n,B,d], prev [n,B] int64, lm_head [V,d], the heads' tensors under their DeepSpec names,
//           gl [n,B,V], gc [n,B] (confidence only)
//       OUT: logits = hidden lm_head^T + W2 u (teacher-forced), confidence, and grad.hidden, grad.<name> of
//            sum(logits * gl) + sum(confidence * gc)
//   dspark_probe step IN OUT (same parameters)
//       IN: hidden [n,B,d], prev [n,B]; OUT: bias [n,B,V], one markov_step per slot with the state carried along
//   dspark_probe objective IN OUT (same parameters) block_size=B gamma=G mask_token_id=M ce=.. l1=.. conf=.. chunk_rows=C
//       IN: input_ids [b,S], loss_mask [b,S] (uint8), anchors [b,N], keep [b,N] (uint8), hidden [b,N*B,d] (the
//           drafter's final hidden states), last_hidden [b,S,d], lm_head [V,d], the heads' tensors
//       OUT: block_ids, labels, weights, teacher_index, prev, loss, stats, row_correct, grad.hidden, grad.<name>,
//            metric.<name> (dspark_metrics)
#include <map>
#include <memory>
#include <string>

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include "drafter_model.h"
#include "dspark_block_batch.h"
#include "dspark_drafter_settings.h"
#include "dspark_heads.h"
#include "dspark_loss.h"
#include "family_registry.h"
#include "probe_main.h"
#include "safetensors.h"

using namespace dflash::drafter;

namespace {

using probe::Named;
using probe::param;

DSparkHeads heads_of(const std::map<std::string, std::string>& p) {
  DSparkHeads h;
  h.markov_rank = std::stoll(param(p, "rank", "0"));
  const auto t = markov_head_type_from_text(param(p, "type", "vanilla"));
  if (!t) throw std::invalid_argument("type: expected vanilla, gated or rnn");
  h.markov_head_type = *t;
  h.enable_confidence_head = param(p, "confidence", "1") == "1";
  h.confidence_head_with_markov = param(p, "with_markov", "1") == "1";
  h.validate("dspark_probe");
  return h;
}

Named load_heads(const dflash::io::SafetensorsFile& in, const DSparkHeads& h, bool grad) {
  Named named;
  for (const auto& [name, shape] : dspark_head_shapes(h, 0, 0)) {
    at::Tensor t = in.load(name);
    if (grad) t.requires_grad_(true);
    named.emplace_back(name, t);
  }
  return named;
}

Named run_heads(const dflash::io::SafetensorsFile& in, const std::map<std::string, std::string>& p) {
  const DSparkHeads h = heads_of(p);
  const Named named = load_heads(in, h, true);
  const DSparkHeadWeights w = dspark_head_weights(h, named);
  const at::Tensor hidden = in.load("hidden").requires_grad_(true), prev = in.load("prev");
  at::Tensor logits = at::linear(hidden, in.load("lm_head"));
  if (h.markov_rank > 0) logits = logits + markov_bias(w, markov_features(h, w, hidden, prev));
  at::Tensor total = (logits * in.load("gl")).sum();
  const at::Tensor conf = confidence_logits(h, w, hidden, prev);
  if (conf.defined()) total = total + (conf * in.load("gc")).sum();
  total.backward();
  Named out = {{"logits", logits.detach()}, {"grad.hidden", hidden.grad()}};
  if (conf.defined()) out.emplace_back("confidence", conf.detach());
  for (const auto& [name, t] : named)
    out.emplace_back("grad." + name, t.grad().defined() ? t.grad() : at::zeros_like(t));
  return out;
}

Named run_step(const dflash::io::SafetensorsFile& in, const std::map<std::string, std::string>& p) {
  const DSparkHeads h = heads_of(p);
  const Named named = load_heads(in, h, false);
  const DSparkHeadWeights w = dspark_head_weights(h, named);
  const at::Tensor hidden = in.load("hidden"), prev = in.load("prev");
  std::vector<at::Tensor> bias;
  at::Tensor state;
  for (int64_t j = 0; j < hidden.size(1); ++j) {
    auto [u, next] = markov_step(h, w, hidden.select(1, j), prev.select(1, j), state);
    state = next;
    bias.push_back(markov_bias(w, u));
  }
  return {{"bias", at::stack(bias, 1)}};
}

Named run_objective(const dflash::io::SafetensorsFile& in, const std::map<std::string, std::string>& p) {
  DrafterConfig c;
  c.family = dflash::drafter::family_named("dspark", "test");
  const DSparkHeads heads = heads_of(p);
  c.family_settings = std::make_shared<const dflash::families::DSparkDrafterSettings>(heads);
  c.block_size = std::stoll(param(p, "block_size", "4"));
  const at::Tensor hidden = in.load("hidden").requires_grad_(true), lm_head = in.load("lm_head");
  c.hidden_size = hidden.size(-1);
  c.vocab_size = lm_head.size(0);
  DrafterWeights w;
  w.heads = load_heads(in, heads, true);
  const AnchorSample s{in.load("anchors"), in.load("keep").to(at::kBool), {}, {}};
  const BlockBatch blocks =
      build_dspark_block_batch(in.load("input_ids"), in.load("loss_mask").to(at::kBool), s, c.block_size,
                               std::stoll(param(p, "mask_token_id", "0")), std::stod(param(p, "gamma", "4")));
  dflash::ops::DSparkLossOptions o;
  o.ce_weight = std::stod(param(p, "ce", "0.1"));
  o.l1_weight = std::stod(param(p, "l1", "0.9"));
  o.confidence_weight = std::stod(param(p, "conf", "1"));
  o.chunk_rows = std::stoll(param(p, "chunk_rows", "1024"));
  const DSparkObjective r = dspark_objective(c, w, lm_head, hidden, in.load("last_hidden"), s.keep, blocks, o);
  r.loss.backward();
  Named out = {{"block_ids", blocks.block_ids}, {"labels", blocks.labels}, {"weights", blocks.weights},
               {"teacher_index", blocks.teacher_index}, {"prev", dspark_prev_tokens(blocks, c.block_size)},
               {"loss", r.loss.detach().reshape({1})}, {"stats", r.stats}, {"row_correct", r.row_correct.to(at::kByte)},
               {"grad.hidden", hidden.grad()}};
  for (const auto& [name, t] : w.heads)
    out.emplace_back("grad." + name, t.grad().defined() ? t.grad() : at::zeros_like(t));
  for (const auto& [name, v] : dspark_metrics(r.stats, c.block_size, heads.enable_confidence_head))
    out.emplace_back("metric." + name, at::full({1}, v, at::kDouble));
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  return probe::run("dspark_probe", argc, argv, {{"heads", run_heads}, {"step", run_step}, {"objective", run_objective}});
}
