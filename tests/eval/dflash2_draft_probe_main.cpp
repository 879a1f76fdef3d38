// dflash2_draft_probe: one cycle of eval's drafter proposer (src/eval/drafter_proposer.h) on a real target and a
// DFlash2 drafter folder, for tests/python/test_eval_dflash2.py (a test tool). Input JSON: {"prompt": [ids],
// "last": id (the committed token after the prompt), "temperature": T, "uniforms": [one per drafted slot],
// "max_draft": n (0: B - 1)}. Output on stdout: {"hidden": [[..] B rows] (the block's final-normed hidden states
// the walk read), "tokens": [..], "probs": [[..] per draft, dense over the vocabulary; empty at T = 0]}, doubles
// printed so they read back exactly.
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include "drafter_proposer.h"
#include "target_loader.h"

int main(int argc, char** argv) {
  using namespace dflash;
  if (argc != 4) {
    std::fprintf(stderr, "usage: dflash2_draft_probe TARGET_DIR DRAFTER_DIR INPUT.json\n");
    return 2;
  }
  try {
    at::NoGradGuard no_grad;
    std::ifstream f(argv[3]);
    const auto in = nlohmann::json::parse(f);
    const auto prompt = in.at("prompt").get<std::vector<int64_t>>();
    const models::TargetModel target = models::load_target(argv[1]);
    const eval::LoadedDrafter drafter = eval::load_drafter(argv[2]);
    eval::DrafterProposer proposer(drafter, target, {.max_draft = in.value("max_draft", int64_t{0})});
    std::vector<int> layers = proposer.target_layers();
    const auto P = static_cast<int64_t>(prompt.size());
    const at::Tensor ids = at::tensor(prompt, at::kLong).view({1, P});
    proposer.start(prompt, target.forward(ids, nullptr, layers, false, true));
    const int64_t last = in.at("last").get<int64_t>();
    const at::Tensor h = proposer.cycle_hidden(last, P).to(at::kDouble).contiguous();
    // The given uniforms in place of the decode's stream, each used once.
    const auto uniforms = in.at("uniforms").get<std::vector<double>>();
    size_t used = 0;
    drafter::DraftSampling sampling;
    sampling.temperature = in.at("temperature").get<double>();
    sampling.uniform = [&] {
      if (used == uniforms.size()) throw std::invalid_argument("\"uniforms\": fewer than the drafted slots");
      return uniforms[used++];
    };
    const eval::Draft d = proposer.draft_with(last, P, sampling);
    if (sampling.temperature > 0 && used != uniforms.size())
      throw std::invalid_argument("\"uniforms\": more than the drafted slots");
    nlohmann::json out = {{"hidden", nlohmann::json::array()}, {"tokens", d.tokens}, {"probs", d.probs}};
    for (int64_t r = 0; r < h.size(0); ++r) {
      const double* p = h.data_ptr<double>() + r * h.size(1);
      out["hidden"].push_back(std::vector<double>(p, p + h.size(1)));
    }
    std::printf("%s\n", out.dump().c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dflash2_draft_probe: %s\n", e.what());
    return 1;
  }
  return 0;
}
