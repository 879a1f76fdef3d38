// The torchrun variables, read in one place (torchrun_env.h): defaults for a single process, the group's address
// when WORLD_SIZE is set, and each malformed or missing variable named.
#include <gtest/gtest.h>

#include <cstdlib>

#include "error_of.h"
#include "torchrun_env.h"

using namespace dflash::train;

namespace {

// Sets the variables for one test and clears them after.
struct Env {
  explicit Env(std::initializer_list<std::pair<const char*, const char*>> vars) {
    for (const char* n : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"})
      ::unsetenv(n);
    for (const auto& [n, v] : vars) ::setenv(n, v, 1);
  }
  ~Env() {
    for (const char* n : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"})
      ::unsetenv(n);
  }
};

}  // namespace

TEST(TorchrunEnv, UnsetIsOneProcess) {
  Env e({});
  const TorchrunEnv t = read_torchrun_env();
  EXPECT_EQ(t.local_rank, 0);
  EXPECT_EQ(t.local_world, 1);
  EXPECT_TRUE(t.single_process(false));
}

TEST(TorchrunEnv, AGroupFromTheVariables) {
  Env e({{"WORLD_SIZE", "2"}, {"RANK", "1"}, {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "2"},
         {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "29500"}});
  const TorchrunEnv t = read_torchrun_env();
  EXPECT_EQ(t.local_rank, 1);
  EXPECT_EQ(t.local_world, 2);
  EXPECT_FALSE(t.single_process(true));
  const GroupAddress g = t.group();
  EXPECT_EQ(g.rank, 1);
  EXPECT_EQ(g.world, 2);
  EXPECT_EQ(g.addr, "127.0.0.1");
  EXPECT_EQ(g.port, 29500);
}

TEST(TorchrunEnv, WorldSizeOneIsOneProcessOnlyWhenAsked) {
  Env e({{"WORLD_SIZE", "1"}});
  const TorchrunEnv t = read_torchrun_env();
  EXPECT_TRUE(t.single_process(true));
  EXPECT_FALSE(t.single_process(false));
  EXPECT_EQ(error_of<std::invalid_argument>([&] { t.group(); }),
            "distributed: a process group needs RANK (set RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT as torchrun does)");
}

TEST(TorchrunEnv, MalformedVariablesAreNamed) {
  {
    Env e({{"LOCAL_RANK", "x"}});
    EXPECT_EQ(error_of<std::invalid_argument>([] { read_torchrun_env(); }),
              "environment: LOCAL_RANK must be a non-negative integer, got 'x'");
  }
  Env e({{"WORLD_SIZE", "2"}, {"RANK", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}});
  EXPECT_EQ(error_of<std::invalid_argument>([] { read_torchrun_env().group(); }),
            "distributed: need 0 <= RANK < WORLD_SIZE, got RANK=2 WORLD_SIZE=2");
}
