// The real SmolLM2 tokenizer from its GGUF (skipped when the file is absent): special ids, round
// trips, the chat format, and concurrent encoding from several threads giving the same ids.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "chat_template.h"
#include "tokenizer.h"

using namespace dflash::tok;

namespace {

const std::string kModel = std::string(DFLASH_SOURCE_DIR) + "/models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";

const Tokenizer& smollm2() {
  static const Tokenizer t = Tokenizer::from_gguf(kModel);
  return t;
}

}  // namespace

class SmolLM2Tokenizer : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(kModel)) GTEST_SKIP() << kModel << " is absent (scripts/setup.sh fetches it)";
  }
};

TEST_F(SmolLM2Tokenizer, SpecialTokensAndRoundTrip) {
  const Tokenizer& t = smollm2();
  EXPECT_EQ(t.vocab_size(), 49152u);
  EXPECT_EQ(t.token_to_id("<|endoftext|>"), 0);
  EXPECT_EQ(t.token_to_id("<|im_start|>"), 1);
  EXPECT_EQ(t.token_to_id("<|im_end|>"), 2);
  EXPECT_EQ(t.bos_id(), 1);
  EXPECT_EQ(t.eos_id(), 2);
  EXPECT_TRUE(t.is_special(2));
  EXPECT_FALSE(t.is_special(100));
  for (const std::string s : {"Hello world!", "  x\n\n\ty 123 ½ 中文 👩‍👩‍👧", "<|im_start|>user\nhi<|im_end|>", ""}) {
    std::vector<int32_t> ids = t.encode(s);
    EXPECT_EQ(t.decode(ids), s);
  }
  EXPECT_EQ(t.encode("<|im_end|>"), (std::vector<int32_t>{2}));
  EXPECT_EQ(t.decode({1, 2}, /*skip_special_tokens=*/true), "");
  EXPECT_THROW(t.decode({49152}), std::out_of_range);
}

TEST_F(SmolLM2Tokenizer, ChatFormatAndAssistantMask) {
  const Tokenizer& t = smollm2();
  ChatFormat f = ChatFormat::from_tokenizer(t);
  ASSERT_TRUE(f.default_system().has_value());
  EXPECT_EQ(*f.default_system(), "You are a helpful AI assistant named SmolLM, trained by Hugging Face");
  std::vector<ChatMessage> msgs = {{"user", "2+2?"}, {"assistant", "4"}};
  ChatText ct = f.render(msgs, false);
  EXPECT_EQ(ct.text, "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
                     "<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n4<|im_end|>\n");
  ChatEncoding e = f.encode(t, msgs, false);
  ASSERT_EQ(e.ids.size(), e.assistant_mask.size());
  // The masked tokens are exactly "4" and <|im_end|> of the assistant turn.
  std::vector<int32_t> masked;
  for (size_t k = 0; k < e.ids.size(); ++k)
    if (e.assistant_mask[k]) masked.push_back(e.ids[k]);
  std::vector<int32_t> want = t.encode("4");
  want.push_back(2);
  EXPECT_EQ(masked, want);
}

TEST_F(SmolLM2Tokenizer, ConcurrentEncodingIsDeterministic) {
  const Tokenizer& t = smollm2();
  std::vector<std::string> texts;
  for (int k = 0; k < 200; ++k)
    texts.push_back("Sample " + std::to_string(k) + ": it's a   test\n\twith <|im_end|> and ünïcödé " + std::string(k % 17, ' '));
  std::vector<std::vector<int32_t>> want;
  for (const auto& s : texts) want.push_back(t.encode(s));
  std::vector<int> mismatches(4, 0);
  std::vector<std::thread> threads;
  for (int th = 0; th < 4; ++th)
    threads.emplace_back([&, th] {
      for (int rep = 0; rep < 3; ++rep)
        for (size_t k = 0; k < texts.size(); ++k)
          if (t.encode(texts[(k + th * 37) % texts.size()]) != want[(k + th * 37) % texts.size()]) ++mismatches[th];
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(mismatches, (std::vector<int>(4, 0)));
}
