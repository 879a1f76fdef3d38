// The families' drafting hooks (drafter/family_drafting.h), without a target: DFlash and the toy family have none
// (eval drafts their plain block itself); DSpark drafts every block slot from the LM head (here a random matrix) and
// cuts by confidence, DFlash2 walks its selector over slots 1..n from the last token; sampling asks the callbacks
// once per draft; what a family cannot draft with is refused naming the config.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include "dflash2_drafting.h"
#include "drafter_config.h"
#include "drafter_weights.h"
#include "family_drafting.h"
#include "family_model.h"
#include "family_registry.h"
#include "tiny_family_config.h"
#include "toy_family.h"

using namespace dflash::drafter;

namespace {

// A block of 4 random hidden states and a random LM head [32, 16] in double (a target's dtype and device need not
// be the drafter's: the callback's result is converted where read).
struct Block {
  at::Tensor lm = at::randn({32, 16}, at::kDouble);
  DraftBlock b;
  Block(int64_t drafts, int64_t last) {
    b.hidden = at::randn({4, 16});
    b.last_token = last;
    b.drafts = drafts;
    b.lm_head = [this](const at::Tensor& x) { return at::matmul(x.to(at::kDouble), lm.t()); };
  }
};

std::vector<int64_t> argmax_rows(const at::Tensor& logits) {
  const at::Tensor a = logits.argmax(-1).contiguous();
  return {a.data_ptr<int64_t>(), a.data_ptr<int64_t>() + a.numel()};
}

}  // namespace

TEST(FamilyDrafting, DFlashAndTheToyFamilyDraftThePlainBlock) {
  dflash::families::testing::register_toy_family();
  for (const char* name : {"dflash", "toy"})
    EXPECT_EQ(model_of(family_named(name, "test")).drafting(), nullptr) << name;
}

TEST(FamilyDrafting, DSparkDraftsEverySlotAndCutsByConfidence) {
  at::manual_seed(3);
  // No Markov head: slot j's draft is the LM head's argmax on hidden row j, slots 0..n-1.
  const DrafterConfig c = tiny_family_config("Qwen3DSparkModel", nlohmann::json::object(),
                               {{"markov_rank", 0}, {"markov_head_type", "vanilla"}, {"enable_confidence_head", true},
                                {"confidence_head_with_markov", false}});
  const DrafterWeights w = init_drafter_weights(c, at::kFloat, 1);
  const FamilyDrafting* f = model_of(c).drafting();
  ASSERT_NE(f, nullptr);
  Block blk(3, 5);
  const BlockDraft g = f->make(c, w, {}, "tiny.json")->draft(blk.b, {});
  EXPECT_EQ(g.tokens, argmax_rows(at::matmul(blk.b.hidden.narrow(0, 0, 3).to(at::kDouble), blk.lm.t())));
  EXPECT_TRUE(g.probs.empty());
  // Threshold 1: no cumulative sigmoid product reaches it, so no draft is kept.
  EXPECT_TRUE(f->make(c, w, {1.0}, "tiny.json")->draft(blk.b, {}).tokens.empty());
  // Sampling: one distribution and one draw per slot, the draw is the draft.
  int draws = 0;
  DraftSampling s;
  s.temperature = 0.7;
  s.probs = [](const at::Tensor& row) { return std::vector<double>(size_t(row.numel()), 1.0); };
  s.draw = [&](const std::vector<double>& p) { EXPECT_EQ(p.size(), 32u); return int64_t(++draws); };
  const BlockDraft d = f->make(c, w, {}, "tiny.json")->draft(blk.b, s);
  EXPECT_EQ(d.tokens, (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(d.probs.size(), 3u);
  // A threshold needs the confidence head.
  const DrafterConfig no_head = tiny_family_config("Qwen3DSparkModel", nlohmann::json::object(),
                                     {{"markov_rank", 0}, {"markov_head_type", "vanilla"},
                                      {"enable_confidence_head", false}, {"confidence_head_with_markov", false}});
  try {
    f->make(no_head, init_drafter_weights(no_head, at::kFloat, 1), {0.5}, "d/config.json");
    ADD_FAILURE() << "no refusal";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("d/config.json has enable_confidence_head false"), std::string::npos)
        << e.what();
  }
}

TEST(FamilyDrafting, DFlash2WalksSlotsOneToNFromTheLastToken) {
  at::manual_seed(5);
  const DrafterConfig c = tiny_family_config("DFlash2DraftModel", {{"conv_kernel_size", 2}, {"conv_group_size", 4},
                                                     {"selector_rank", 4}, {"selector_top_k", 4}});
  DrafterWeights w = init_drafter_weights(c, at::kFloat, 7);
  w.selector.successor_codebook = at::randn_like(w.selector.successor_codebook);  // a walk that depends on p_k
  const FamilyDrafting* f = model_of(c).drafting();
  ASSERT_NE(f, nullptr);
  Block blk(2, 9);
  const at::Tensor h = blk.b.hidden.narrow(0, 1, 2);
  const dflash::drafter::Candidates cands = dflash::families::unary_candidates(blk.b.lm_head(h.unsqueeze(0))[0], 4);
  const BlockDraft ref = dflash::families::selector_path_draft(w.selector, cands, h, 9, 32, 0.0, {});
  EXPECT_EQ(f->make(c, w, {}, "tiny.json")->draft(blk.b, {}).tokens, ref.tokens);
  // Sampling: one uniform per drafted slot, read in order.
  std::vector<double> u = {0.3, 0.8};
  size_t used = 0;
  DraftSampling s;
  s.temperature = 0.9;
  s.uniform = [&] { return u.at(used++); };
  const BlockDraft d = f->make(c, w, {}, "tiny.json")->draft(blk.b, s);
  EXPECT_EQ(used, 2u);
  const BlockDraft dref = dflash::families::selector_path_draft(w.selector, cands, h, 9, 32, 0.9, u);
  EXPECT_EQ(d.tokens, dref.tokens);
  EXPECT_EQ(d.probs, dref.probs);
}
