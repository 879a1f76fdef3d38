// The fused-vs-reference self-check (attention_selfcheck.h) on the CPU: it passes where the fused op is right
// (every CPU dtype, windows, packed rows, forward and backward), reports each tensor's error and tolerance and
// the timings, fails with the exception's first line where the fused op cannot run (fp16 has no CPU kernel),
// and the choice it drives: reference without a check, fused refusing with the device and the reason, auto
// falling back. (Wrong numbers from the fused op are tested through DFLASH_FAULT_INJECT in tests/python.)
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "attention_selfcheck.h"

namespace {

using namespace dflash::ops;

AttentionCheckSpec small_spec(at::ScalarType dtype) {
  AttentionCheckSpec s;
  s.dtype = dtype;
  s.context_len = 90;
  s.q_heads = 4, s.kv_heads = 2, s.head_dim = 32, s.block_size = 8;
  return s;
}

TEST(AttentionSelfCheck, PassesOnTheCpuForEveryDtypeWindowAndPacking) {
  for (const auto dtype : {at::kFloat, at::kBFloat16, at::kDouble})
    for (const int64_t window : {0, 20})
      for (const bool packed : {false, true}) {
        AttentionCheckSpec s = small_spec(dtype);
        s.window = window;
        s.packed = packed;
        const AttentionCheckResult r = check_fused_attention(s);
        EXPECT_TRUE(r.passed) << s.describe() << ": " << r.summary();
        ASSERT_EQ(r.tensors.size(), 4u);
        for (const auto& t : r.tensors) {
          EXPECT_GT(t.magnitude, 0) << t.name;
          EXPECT_LE(t.error, t.tolerance) << t.name;
        }
        EXPECT_GE(r.fused_ms, 0);
        EXPECT_GE(r.reference_ms, 0);
        EXPECT_TRUE(r.exception.empty());
      }
}

TEST(AttentionSelfCheck, ForwardOnlyComparesTheOutput) {
  AttentionCheckSpec s = small_spec(at::kFloat);
  s.backward = false;
  s.timing_reps = 2;
  const AttentionCheckResult r = check_fused_attention(s);
  EXPECT_TRUE(r.passed) << r.summary();
  ASSERT_EQ(r.tensors.size(), 1u);
  EXPECT_EQ(r.tensors[0].name, "out");
  EXPECT_NE(s.describe().find("cpu fp32, S 90, Hq 4, Hkv 2, D 32, B 8, window 0, forward"), std::string::npos)
      << s.describe();
}

// A realistic shape to time (dflash doctor): more blocks than the six edge cases, spread over the context.
TEST(AttentionSelfCheck, MoreBlocksAreSpreadOverTheContext) {
  AttentionCheckSpec s = small_spec(at::kFloat);
  s.num_blocks = 20;
  s.packed = true;
  const AttentionCheckResult r = check_fused_attention(s);
  EXPECT_TRUE(r.passed) << r.summary();
  EXPECT_NE(s.describe().find(", B 8, N 20, window 0, packed, forward+backward"), std::string::npos) << s.describe();
  s.num_blocks = 5;  // fewer than the edge cases
  EXPECT_THROW(check_fused_attention(s), std::exception);
}

TEST(AttentionSelfCheck, AFusedOpThatThrowsFailsWithItsFirstLine) {
  const AttentionCheckResult r = check_fused_attention(small_spec(at::kHalf));
  EXPECT_FALSE(r.passed);
  EXPECT_NE(r.exception.find("dtype must be float32, bfloat16 or float64, got Half"), std::string::npos) << r.exception;
  EXPECT_EQ(r.exception.find('\n'), std::string::npos);
  EXPECT_EQ(r.summary().rfind("threw: ", 0), 0u) << r.summary();
}

TEST(AttentionSelfCheck, ChoiceFollowsWhatWasAsked) {
  const auto specs = specs_for_windows(small_spec(at::kFloat), {0, 20, 0, 20});
  ASSERT_EQ(specs.size(), 2u);  // one per distinct window
  const AttentionChoice ok = choose_attention_backend(AttentionBackend::Auto, specs);
  EXPECT_EQ(ok.backend, AttentionBackend::Fused);
  EXPECT_EQ(ok.checks.size(), 2u);
  EXPECT_FALSE(ok.fell_back());
  EXPECT_EQ(ok.line.rfind("attention: cpu: fused (self-check against the reference passed: full ", 0), 0u) << ok.line;
  EXPECT_NE(ok.line.find("; window 20 "), std::string::npos) << ok.line;

  const AttentionChoice ref = choose_attention_backend(AttentionBackend::Reference, specs);
  EXPECT_EQ(ref.backend, AttentionBackend::Reference);
  EXPECT_TRUE(ref.checks.empty());

  const auto broken = specs_for_windows(small_spec(at::kHalf), {0});
  const AttentionChoice fb = choose_attention_backend(AttentionBackend::Auto, broken);
  EXPECT_TRUE(fb.fell_back());
  EXPECT_NE(fb.line.find("attention: cpu: the fused op failed its self-check (cpu fp16"), std::string::npos) << fb.line;
  EXPECT_NE(fb.line.find("falling back to the reference attention on cpu"), std::string::npos) << fb.line;
  try {
    choose_attention_backend(AttentionBackend::Fused, broken);
    FAIL() << "fused must refuse";
  } catch (const std::runtime_error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("attention_backend fused: the fused attention failed its self-check against the reference on cpu"),
              std::string::npos) << msg;
    EXPECT_NE(msg.find("got Half"), std::string::npos) << msg;
  }
}

TEST(AttentionSelfCheck, AReferenceThatCannotRunIsNamedNotTheFusedOp) {
  // A context no machine can hold: the reference's inputs cannot be allocated. Falling back to the reference would
  // fail the same way, so the choice says the reference failed instead of blaming the fused op.
  AttentionCheckSpec huge = small_spec(at::kFloat);
  huge.context_len = int64_t(1) << 44;
  const AttentionCheckResult r = check_fused_attention(huge);
  EXPECT_FALSE(r.passed);
  EXPECT_FALSE(r.reference_exception.empty());
  for (const AttentionBackend b : {AttentionBackend::Auto, AttentionBackend::Fused}) {
    try {
      choose_attention_backend(b, {huge});
      FAIL() << "a reference that cannot run must stop the choice";
    } catch (const std::runtime_error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("attention self-check on cpu: the reference attention itself failed ("), std::string::npos) << msg;
      EXPECT_NE(msg.find("neither backend can run this shape on cpu"), std::string::npos) << msg;
      EXPECT_EQ(msg.find("falling back"), std::string::npos) << msg;
    }
  }
}

TEST(AttentionSelfCheck, BackendNamesHaveOneSpelling) {
  EXPECT_EQ(parse_attention_backend("auto", "x"), AttentionBackend::Auto);
  EXPECT_EQ(parse_attention_backend("fused", "x"), AttentionBackend::Fused);
  EXPECT_EQ(parse_attention_backend("reference", "x"), AttentionBackend::Reference);
  for (const auto b : {AttentionBackend::Auto, AttentionBackend::Fused, AttentionBackend::Reference})
    EXPECT_EQ(parse_attention_backend(attention_backend_name(b), "x"), b);
  try {
    parse_attention_backend("flash", "eval: --attention-backend");
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "eval: --attention-backend: expected auto, fused or reference, got 'flash'");
  }
}

}  // namespace
