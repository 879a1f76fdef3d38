// The fused CPU cross-entropy kernel's self-check (loss_selfcheck.h): it passes where the kernel is right (fp32
// and bf16, vocabularies with and without a vector tail), with errors well inside the tolerance, and the
// vocabulary a check uses for a large head. (Wrong numbers from the kernel: DFLASH_FAULT_INJECT in tests/python.)
#include <gtest/gtest.h>

#include "loss_selfcheck.h"

namespace {

using namespace dflash::ops;

TEST(LossSelfCheck, PassesForTheKernelsDtypes) {
  for (const auto dtype : {at::kFloat, at::kBFloat16})
    for (const int64_t vocab : {int64_t(1000), int64_t(2048 + 37)}) {
      LossCheckSpec s;
      s.dtype = dtype;
      s.hidden = 96;
      s.vocab = vocab;
      const LossCheckResult r = check_fused_cross_entropy(s);
      EXPECT_TRUE(r.passed) << s.describe() << ": " << r.summary();
      ASSERT_EQ(r.tensors.size(), 5u);
      EXPECT_EQ(r.tensors[0].name, "loss");
      EXPECT_EQ(r.tensors[1].name, "dhidden");
      EXPECT_EQ(r.tensors[2].name, "dspark loss");
      EXPECT_EQ(r.tensors[3].name, "dspark dhidden");
      EXPECT_EQ(r.tensors[4].name, "dspark dW2");
      for (const auto& t : r.tensors) {
        EXPECT_GT(t.magnitude, 0);
        EXPECT_LT(t.error, t.tolerance) << t.name;
      }
    }
}

TEST(LossSelfCheck, CheckVocabularyKeepsTheTail) {
  EXPECT_EQ(loss_check_vocab(1000), 1000);
  EXPECT_EQ(loss_check_vocab(151936), 2048 + 151936 % 64);
  EXPECT_EQ(loss_check_vocab(248320) % 64, 248320 % 64);
  LossCheckSpec s;
  s.dtype = at::kBFloat16;
  EXPECT_EQ(s.describe(), "cpu bf16, H 256, V 4096, 32 rows");
}

}  // namespace
