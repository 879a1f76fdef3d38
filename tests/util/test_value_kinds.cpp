// The torch-free value kinds every setting is read into (util/dtype_names.h, byte_size.h, index_list.h): what each
// accepts, what it refuses, and that writing a value back reads as the same value.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "byte_size.h"
#include "dtype_names.h"
#include "error_of.h"
#include "index_list.h"

using namespace dflash::util;

TEST(Dtype, EverySpellingAndItsCanonicalName) {
  EXPECT_EQ(dtype_from_name("bfloat16"), Dtype::BF16);
  EXPECT_EQ(dtype_from_name("half"), Dtype::F16);
  EXPECT_EQ(dtype_from_name("double"), Dtype::F64);
  EXPECT_EQ(dtype_from_name("float"), Dtype::F32);
  EXPECT_FALSE(dtype_from_name("fp8").has_value());
  for (const Dtype d : {Dtype::F32, Dtype::BF16, Dtype::F16, Dtype::F64}) {
    EXPECT_EQ(dtype_from_name(dtype_name(d)), d);     // the canonical name reads back
    EXPECT_EQ(dtype_from_name(hf_dtype_name(d)), d);  // and so does config.json's
  }
  EXPECT_EQ(dtype_bytes(Dtype::BF16), 2);
  EXPECT_EQ(dtype_bytes(Dtype::F64), 8);
  EXPECT_EQ(error_of<std::invalid_argument>([] { parse_dtype("fp8", "x: --dtype"); }),
            "x: --dtype: expected fp32, bf16, fp16 or fp64, got 'fp8'");
}

TEST(ByteSize, UnitsAndRefusals) {
  EXPECT_DOUBLE_EQ(parse_byte_size("90GB", "b").bytes, 90e9);
  EXPECT_DOUBLE_EQ(parse_byte_size("80 GiB", "b").bytes, 80.0 * 1024 * 1024 * 1024);
  EXPECT_DOUBLE_EQ(parse_byte_size("1.5e9", "b").bytes, 1.5e9);
  EXPECT_EQ(parse_byte_size("512MB", "b").text, "512MB");
  EXPECT_NE(error_of<std::invalid_argument>([] { parse_byte_size("90XB", "plan: --budget"); })
                .find("plan: --budget: unknown unit 'XB'"),
            std::string::npos);
  for (const char* bad : {"", "GB", "-5GB", "0", "inf", "nan"})
    EXPECT_THROW(parse_byte_size(bad, "b"), std::invalid_argument) << bad;
  EXPECT_EQ(human_bytes(57.07e9), "57.07 GB");
}

TEST(IndexList, OneGrammarForEveryReader) {
  EXPECT_EQ(read_index_list("1, 9,17").ids, (std::vector<int64_t>{1, 9, 17}));
  EXPECT_EQ(read_index_list("1,,9,").ids, (std::vector<int64_t>{1, 9}));  // empty items are skipped
  EXPECT_TRUE(read_index_list("").ids.empty());
  EXPECT_EQ(read_index_list("1,9,1").repeated, 1);
  EXPECT_FALSE(read_index_list("1,9,1").ok());
  for (const char* bad : {"1,x", "-1", "+3", "2147483648", "9999000000000000000", "1.5"})
    EXPECT_FALSE(read_index_list(bad).bad_item.empty()) << bad;
  EXPECT_EQ(read_index_list("3,x,4").bad_item, "x");
  EXPECT_EQ(join_indices({1, 16, 31}), "1,16,31");
  EXPECT_EQ(read_index_list(join_indices({0, 2147483647})).ids, (std::vector<int64_t>{0, 2147483647}));
}
