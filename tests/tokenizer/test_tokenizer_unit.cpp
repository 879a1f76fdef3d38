// Tokenizer building blocks on hand-checked cases. Exactness against HF `tokenizers` on real text is
// tests/python/test_tokenizer.py; these pin the pieces so a failure there can be located.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "bpe.h"
#include "normalizer_nfc.h"
#include "pretokenizer.h"
#include "tokenizer.h"
#include "unicode.h"

using namespace dflash::tok;

namespace {

std::vector<std::string> split(const PreTokenizer& p, const std::string& text) {
  auto cps = decode_utf8(text);
  std::vector<std::string> out;
  for (const Piece& pc : p.split(cps, 0, cps.size())) {
    size_t b0 = pc.begin < cps.size() ? cps[pc.begin].byte_pos : text.size();
    size_t b1 = pc.end < cps.size() ? cps[pc.end].byte_pos : text.size();
    out.push_back((pc.prefix_space ? "^" : "") + text.substr(b0, b1 - b0));
  }
  return out;
}

using V = std::vector<std::string>;

}  // namespace

TEST(Unicode, ByteAlphabetIsABijection) {
  std::set<uint32_t> seen;
  for (int b = 0; b < 256; ++b) {
    uint32_t cp = byte_to_unicode(static_cast<uint8_t>(b));
    EXPECT_TRUE(seen.insert(cp).second);
    EXPECT_EQ(unicode_to_byte(cp), b);
  }
  EXPECT_EQ(byte_to_unicode(' '), 0x120u);  // 'Ġ'
  EXPECT_EQ(byte_to_unicode('\n'), 0x10Au);  // 'Ċ'
  EXPECT_EQ(byte_to_unicode('a'), static_cast<uint32_t>('a'));
  EXPECT_EQ(unicode_to_byte(0x4E00), -1);
}

TEST(Unicode, Classes) {
  EXPECT_EQ(unicode_classes('a'), static_cast<uint32_t>(kLetter));
  EXPECT_EQ(unicode_classes('7'), static_cast<uint32_t>(kNumber | kNumeric));
  EXPECT_EQ(unicode_classes(' '), static_cast<uint32_t>(kWhitespace));
  EXPECT_EQ(unicode_classes(0x4E00), static_cast<uint32_t>(kLetter));   // CJK
  EXPECT_EQ(unicode_classes(0x0301), static_cast<uint32_t>(kMark));     // combining acute
  EXPECT_EQ(unicode_classes(0x3000), static_cast<uint32_t>(kWhitespace));
  EXPECT_EQ(unicode_classes(0x00BD) & kNumber, static_cast<uint32_t>(kNumber));  // ½
  EXPECT_EQ(unicode_classes(0x1F600), 0u);  // emoji: none
  EXPECT_EQ(unicode_classes(0x200B), 0u);   // zero width space is not \s
}

TEST(Unicode, Utf8LossyReplacesMaximalInvalidParts) {
  EXPECT_EQ(utf8_lossy("ok \xC3\xA9"), "ok \xC3\xA9");
  EXPECT_EQ(utf8_lossy("\xE2\x82"), "\xEF\xBF\xBD");                              // one truncated sequence
  EXPECT_EQ(utf8_lossy("\xC0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD");                  // C0 never starts one
  EXPECT_EQ(utf8_lossy("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // surrogate
  EXPECT_EQ(utf8_lossy("\xF0\x9F\x98x"), "\xEF\xBF\xBDx");
}

TEST(PreTokenizer, Gpt2) {
  PreTokenizer p({{PreTokenizerStep::kSplit, SplitRegex::GPT2, false}});
  EXPECT_EQ(split(p, "Hello  world"), (V{"Hello", " ", " world"}));
  EXPECT_EQ(split(p, "it's 'Sup"), (V{"it", "'s", " '", "Sup"}));
  EXPECT_EQ(split(p, "a  \n\nb  "), (V{"a", "  \n", "\n", "b", "  "}));  // (?!\S) leaves one
  EXPECT_EQ(split(p, "x123 !!"), (V{"x", "123", " !!"}));
}

TEST(PreTokenizer, DigitsThenGpt2) {
  PreTokenizer p({{PreTokenizerStep::kDigits, SplitRegex::GPT2, true}, {PreTokenizerStep::kSplit, SplitRegex::GPT2, false}});
  EXPECT_EQ(split(p, "a  12"), (V{"a", "  ", "1", "2"}));
}

TEST(PreTokenizer, Llama3) {
  PreTokenizer p({{PreTokenizerStep::kSplit, SplitRegex::LLAMA3, false}});
  EXPECT_EQ(split(p, "12345 ab"), (V{"123", "45", " ab"}));
  EXPECT_EQ(split(p, "I'M \tx"), (V{"I", "'M", " ", "\tx"}));
  EXPECT_EQ(split(p, "a \n \nb"), (V{"a", " \n \n", "b"}));
  EXPECT_EQ(split(p, "?!\n\nx"), (V{"?!\n\n", "x"}));
}

TEST(PreTokenizer, PrefixSpace) {
  PreTokenizer p({{PreTokenizerStep::kPrefixSpace, SplitRegex::GPT2, false}, {PreTokenizerStep::kSplit, SplitRegex::GPT2, false}});
  EXPECT_EQ(split(p, "hi there"), (V{"^hi", " there"}));
  EXPECT_EQ(split(p, " hi"), (V{" hi"}));
}

TEST(BPE, MergesByRankLeftmostFirst) {
  // Vocabulary in the byte alphabet; "Ġ" is the space.
  std::vector<std::string> vocab = {"a", "b", "c", "ab", "bc", "abc", "Ġ", "Ġa"};
  BPE bpe(vocab, {{"b", "c"}, {"a", "b"}, {"a", "bc"}, {"Ġ", "a"}}, false, "test");
  std::vector<int32_t> ids;
  std::vector<uint32_t> lens;
  bpe.encode_word("abc", ids, lens);  // b+c (rank 0) first, then a+bc
  EXPECT_EQ(ids, (std::vector<int32_t>{5}));
  ids.clear();
  lens.clear();
  bpe.encode_word("abab", ids, lens);  // a+b twice, left first; no ab+ab merge
  EXPECT_EQ(ids, (std::vector<int32_t>{3, 3}));
  EXPECT_EQ(lens, (std::vector<uint32_t>{2, 2}));
  ids.clear();
  lens.clear();
  bpe.encode_word(" a", ids, lens);
  EXPECT_EQ(ids, (std::vector<int32_t>{7}));
  EXPECT_THROW(BPE(vocab, {{"c", "a"}}, false, "test"), std::runtime_error);  // "ca" not in the vocabulary
}

TEST(Normalizer, Nfc) {
  EXPECT_EQ(nfc("plain ascii"), "plain ascii");
  EXPECT_EQ(nfc("e\xCC\x81"), "\xC3\xA9");                          // e + acute -> é
  EXPECT_EQ(nfc("\xE1\x84\x80\xE1\x85\xA1\xE1\x86\xA8"), "\xEA\xB0\x81");  // jamo -> 각
  EXPECT_EQ(nfc("\xE2\x84\xAB"), "\xC3\x85");                       // Angstrom sign -> Å (singleton)
  EXPECT_EQ(nfc("a\xCC\xA3\xCC\x81"), nfc("a\xCC\x81\xCC\xA3"));     // canonical order
}

// Fuzz findings (tests/fuzz/fuzz_tokenizer_json.cpp): a tokenizer.json whose ids do not name one token each is
// refused when it loads, with the file named, instead of failing later inside an encode or decode.
namespace {

std::string tiny_tokenizer_json(const std::string& added, const std::string& post_processor) {
  return R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]},
             "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true},
             "decoder": {"type": "ByteLevel"}, "added_tokens": [)" + added + R"(],
             "post_processor": )" + post_processor + "}";
}

std::string load_error(const std::string& text) {
  try {
    dflash::tok::Tokenizer::from_tokenizer_json_text(text, "/no-such-dir/t.json");
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(TokenizerJson, LoadsTheTinyTokenizer) {
  const auto t = dflash::tok::Tokenizer::from_tokenizer_json_text(
      tiny_tokenizer_json(R"({"id": 3, "content": "<s>", "special": true})", "null"), "/no-such-dir/t.json");
  EXPECT_EQ(t.encode("ab"), (std::vector<int32_t>{2}));
  EXPECT_TRUE(t.has_token(3));
  EXPECT_FALSE(t.has_token(4));
}

TEST(TokenizerJson, TwoAddedTokensWithOneIdAreRefused) {
  const std::string e = load_error(tiny_tokenizer_json(
      R"({"id": 5, "content": "<x>", "special": true}, {"id": 5, "content": "<y>", "special": true})", "null"));
  EXPECT_NE(e.find("/no-such-dir/t.json"), std::string::npos) << e;
  EXPECT_NE(e.find("added token id 5 is given to both '<x>' and '<y>'"), std::string::npos) << e;
}

TEST(TokenizerJson, PostProcessorIdInAGapIsRefused) {
  // Vocabulary 0..2, an added token at 5: ids 3 and 4 name nothing.
  const std::string e = load_error(tiny_tokenizer_json(
      R"({"id": 5, "content": "<s>", "special": true})",
      R"({"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
          {"Sequence": {"id": "A", "type_id": 0}}], "special_tokens": {"<s>": {"id": "<s>", "ids": [3], "tokens": ["<s>"]}}})"));
  EXPECT_NE(e.find("/no-such-dir/t.json"), std::string::npos) << e;
  EXPECT_NE(e.find("post_processor special token id 3 is not a token"), std::string::npos) << e;
}

TEST(TokenizerJson, DecodingAGapIdNamesTheFile) {
  const auto t = dflash::tok::Tokenizer::from_tokenizer_json_text(
      tiny_tokenizer_json(R"({"id": 5, "content": "<s>", "special": true})", "null"), "/no-such-dir/t.json");
  try {
    t.decode({4});
    FAIL() << "decoding id 4 (no token) was accepted";
  } catch (const std::out_of_range& e) {
    EXPECT_NE(std::string(e.what()).find("/no-such-dir/t.json: token id 4 has no token"), std::string::npos) << e.what();
  }
}
