// The one rule every numeric setting is checked by (number_range.h): finite, not subnormal, inside the bounds;
// the range and the value written the same way in every message.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <limits>
#include <stdexcept>

#include "args.h"
#include "error_of.h"
#include "number_range.h"

namespace {

using namespace dflash::util;

TEST(NumberRange, FiniteNormalValuesInsideTheBounds) {
  const NumberRange r = above(0, 1);
  EXPECT_TRUE(r.contains(1));
  EXPECT_TRUE(r.contains(1e-300));  // normal: allowed where the bound allows it
  EXPECT_FALSE(r.contains(0));      // open lower bound
  EXPECT_FALSE(r.contains(1.0000001));
  EXPECT_FALSE(r.contains(std::nan("")));
  EXPECT_FALSE(r.contains(std::numeric_limits<double>::infinity()));
  EXPECT_FALSE(r.contains(std::numeric_limits<double>::denorm_min()));  // subnormal: never a setting
  EXPECT_FALSE(r.contains(1e-310));
  EXPECT_TRUE(closed(0, 1).contains(0));
  EXPECT_TRUE(closed(-1, 1).contains(-0.0));
  EXPECT_FALSE(below(0, 1).contains(1));
  EXPECT_EQ(closed(1e-12, 10).text(), "a finite number in [1e-12, 10]");
  EXPECT_EQ(above(0, 1000).text(), "a finite number in (0, 1000]");
  EXPECT_EQ(below(0, 1).text(), "a finite number in [0, 1)");
}

TEST(NumberRange, NumbersAreWrittenShortestAndByName) {
  EXPECT_EQ(number_text(0.9), "0.9");
  EXPECT_EQ(number_text(1e-39), "1e-39");
  EXPECT_EQ(number_text(1000000), "1000000");
  EXPECT_EQ(number_text(1e308), "1e+308");
  EXPECT_EQ(number_text(0.1 + 0.2), "0.30000000000000004");  // exact: it reads back as the same double
  EXPECT_EQ(number_text(std::nan("")), "nan");
  EXPECT_EQ(number_text(-std::numeric_limits<double>::infinity()), "-inf");
}

TEST(NumberRange, MessagesNameTheSettingTheRangeAndTheValue) {
  EXPECT_EQ(error_of<std::invalid_argument>([] { check_number(std::nan(""), closed(0, 1), "plan: --kl-weight", " (0: off)"); }),
            "plan: --kl-weight must be a finite number in [0, 1] (0: off), got nan");
  EXPECT_EQ(error_of<std::invalid_argument>([] { check_integer(0, 2, 1024, "plan: --block-size"); }),
            "plan: --block-size must be an integer in [2, 1024], got 0");
  EXPECT_EQ(check_number(0.5, closed(0, 1), "x"), 0.5);
  EXPECT_EQ(out_of_range(0.5, closed(0, 1)), std::nullopt);
  EXPECT_EQ(*out_of_range(2, closed(0, 1), " (note)"), "a finite number in [0, 1] (note)");
}

TEST(NumberRange, EnvironmentIntegersAreWholeOrRefused) {
  const char* name = "DFLASH_TEST_NUMBER_RANGE_VAR";
  ::unsetenv(name);
  EXPECT_EQ(env_integer(name, 0, 9), std::nullopt);
  ::setenv(name, "7", 1);
  EXPECT_EQ(env_integer(name, 0, 9), 7);
  for (const char* bad : {"junk", "7x", "10", "-1", "99999999999999999999"}) {
    ::setenv(name, bad, 1);
    EXPECT_EQ(error_of<std::invalid_argument>([&] { env_integer(name, 0, 9, " (a test)"); }),
              std::string(name) + " must be an integer in [0, 9] (a test), got '" + bad + "'");
  }
  ::unsetenv(name);
}

TEST(NumberRange, ArgsCheckDeclaredRangesWhenAValueIsRead) {
  Args a("cmd", "test");
  a.option("x", "X", "0.5", "").option("n", "N", "3", "").option("free", "X", "inf", "").option("unused", "N", "1", "");
  a.range("x", closed(0, 1)).range("n", 1, 8, " (n)");
  ASSERT_TRUE(a.parse({"--x", "nan", "--n", "9", "--unused", "2"}));
  EXPECT_EQ(error_of<std::invalid_argument>([&] { a.f64("x"); }), "cmd: --x must be a finite number in [0, 1], got nan");
  EXPECT_EQ(error_of<std::invalid_argument>([&] { a.i64("n"); }), "cmd: --n must be an integer in [1, 8] (n), got 9");
  EXPECT_TRUE(std::isinf(a.f64("free")));  // no range declared: the caller checks (train's validate())
  EXPECT_EQ(error_of<UsageError>([&] { a.refuse_given({"free", "unused"}, "here (why)"); }), "cmd: --unused is not used here (why)");
  EXPECT_EQ(error_of<UsageError>([&] { a.i64("free"); }), "cmd: --free expects an integer, got 'inf'");
}

}  // namespace
