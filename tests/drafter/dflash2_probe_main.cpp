// dflash2_probe: runs one DFlash2 building block on tensors from a safetensors file and writes its outputs and
// gradients, for tests/python/test_dflash2_modules.py to compare against tests/python/family_reference.py.
// A test tool, not a dflash command.
//
//   dflash2_probe conv IN OUT group_size=G block_size=B
//       IN: u [b,L,d], base_kernel, kernel_projection, sub_w [d,d], gy [b,L,d]; sublayer(h) = tanh(h sub_w^T)
//       OUT: y, grad.u, grad.base_kernel, grad.kernel_projection (of sum(y * gy))
//   dflash2_probe walk IN OUT top_k=K temperature=T vocab_chunk=C output_multiplier=M softcap=S
//       IN: hidden [n,L,d], lm_head [V,d], anchors [n], the selector weights, uniforms [n,L] (T > 0)
//       OUT: path, candidates, q, scores
//   dflash2_probe loss IN OUT top_k=K mode=inject|strict stop_gradient=0|1 vocab_chunk=C output_multiplier=M softcap=S
//                      loss_scale=X
//       IN: hidden [n,d], lm_head, predecessors, targets, weights [n], the selector weights (any one float dtype)
//       OUT: loss, ce_sum, covered_weight, weight, rows, recall_hits, selector_hits, grad.<input> (of X * loss:
//            the trainer backpropagates the loss times the micro-batch's weight; X defaults to 1)
//   dflash2_probe metrics IN OUT top_k=K vocab_chunk=C output_multiplier=M softcap=S
//       IN: hidden [N,B,d], lm_head, anchors [N], targets [N,B], mask [N,B] (uint8), the selector weights
//       OUT: blocks, path_length_sum, oracle_length_sum, unary_length_sum
#include <map>
#include <string>

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include "candidate_selector.h"
#include "dynamic_block_conv.h"
#include "probe_main.h"
#include "safetensors.h"
#include "selector_metrics.h"

using namespace dflash::drafter;

namespace {

using probe::Named;
using probe::param;

SelectorWeights selector_of(const dflash::io::SafetensorsFile& in, bool grad) {
  SelectorWeights w{in.load("hidden_projection"), in.load("predecessor_codebook"), in.load("successor_codebook")};
  if (grad)
    for (auto* t : {&w.hidden_projection, &w.predecessor_codebook, &w.successor_codebook}) t->requires_grad_(true);
  return w;
}

UnaryLogitOptions unary_of(const std::map<std::string, std::string>& p) {
  return {std::stod(param(p, "output_multiplier", "1")), std::stod(param(p, "softcap", "0"))};
}

Named run_conv(const dflash::io::SafetensorsFile& in, const std::map<std::string, std::string>& p) {
  const at::Tensor u = in.load("u").requires_grad_(true);
  const BlockConvWeights w{in.load("base_kernel").requires_grad_(true), in.load("kernel_projection").requires_grad_(true)};
  const at::Tensor sub_w = in.load("sub_w");
  const BlockConvShape s{std::stoll(param(p, "group_size", "16")), std::stoll(param(p, "block_size", "16"))};
  const at::Tensor y =
      conv_wrapped_sublayer(u, w, s, [&](const at::Tensor& h) { return at::tanh(at::linear(h, sub_w)); });
  (y * in.load("gy")).sum().backward();
  return {{"y", y.detach()}, {"grad.u", u.grad()}, {"grad.base_kernel", w.base_kernel.grad()},
          {"grad.kernel_projection", w.kernel_projection.grad()}};
}

Named run_walk(const dflash::io::SafetensorsFile& in, const std::map<std::string, std::string>& p) {
  const at::Tensor hidden = in.load("hidden"), head = in.load("lm_head");
  const double T = std::stod(param(p, "temperature", "0"));
  const Candidates c =
      top_candidates(hidden, head, std::stoll(param(p, "top_k", "16")), unary_of(p), std::stoll(param(p, "vocab_chunk", "8192")));
  const SelectorWalk w = selector_walk(selector_of(in, false), c, hidden, in.load("anchors"), T,
                                       T > 0 ? in.load("uniforms") : at::Tensor());
  return {{"path", w.path}, {"candidates", w.candidates}, {"q", w.q}, {"scores", w.scores}};
}

Named run_loss(const dflash::io::SafetensorsFile& in, const std::map<std::string, std::string>& p) {
  const at::Tensor hidden = in.load("hidden").requires_grad_(true);
  const SelectorWeights w = selector_of(in, true);
  SelectorLossOptions opt;
  opt.top_k = std::stoll(param(p, "top_k", "16"));
  const std::string mode = param(p, "mode", "inject");
  if (mode != "inject" && mode != "strict") throw std::invalid_argument("mode: expected inject or strict, got " + mode);
  opt.candidates = mode == "inject" ? SelectorCandidates::Inject : SelectorCandidates::Strict;
  opt.stop_gradient = param(p, "stop_gradient", "0") == "1";
  opt.vocab_chunk = std::stoll(param(p, "vocab_chunk", "8192"));
  opt.unary = unary_of(p);
  const SelectorLossTerms t = selector_loss_terms(w, hidden, in.load("lm_head"), in.load("predecessors"),
                                                  in.load("targets"), in.load("weights"), opt);
  const at::Tensor loss = selector_loss(t);
  (loss * std::stod(param(p, "loss_scale", "1"))).backward();
  auto grad = [](const at::Tensor& x) { return x.grad().defined() ? x.grad() : at::zeros_like(x); };
  return {{"loss", loss.detach().reshape({1})},
          {"ce_sum", t.ce_sum.detach().reshape({1})},
          {"covered_weight", t.covered_weight.reshape({1})},
          {"weight", t.weight.reshape({1})},
          {"rows", t.rows.reshape({1})},
          {"recall_hits", t.recall_hits.reshape({1})},
          {"selector_hits", t.selector_hits.reshape({1})},
          {"grad.hidden", grad(hidden)},
          {"grad.hidden_projection", grad(w.hidden_projection)},
          {"grad.predecessor_codebook", grad(w.predecessor_codebook)},
          {"grad.successor_codebook", grad(w.successor_codebook)}};
}

Named run_metrics(const dflash::io::SafetensorsFile& in, const std::map<std::string, std::string>& p) {
  const SelectorBlockMetrics m = selector_block_metrics(
      selector_of(in, false), in.load("hidden"), in.load("lm_head"), in.load("anchors"), in.load("targets"),
      in.load("mask").to(at::kBool), std::stoll(param(p, "top_k", "16")), unary_of(p),
      std::stoll(param(p, "vocab_chunk", "8192")));
  return {{"blocks", m.blocks.reshape({1})}, {"path_length_sum", m.path_length_sum.reshape({1})},
          {"oracle_length_sum", m.oracle_length_sum.reshape({1})},
          {"unary_length_sum", m.unary_length_sum.reshape({1})}};
}

}  // namespace

int main(int argc, char** argv) {
  return probe::run("dflash2_probe", argc, argv,
                    {{"conv", run_conv}, {"walk", run_walk}, {"loss", run_loss}, {"metrics", run_metrics}});
}
