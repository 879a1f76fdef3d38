// The families' export hooks: each family's own rows of the serving-engine rule (Family::engine_rules, in its
// folder), the remote-code files that registering a family adds to an export folder's files
// (util/output_folder.h), and bench step's objective benchmark, which a family without an objective of its own
// does not have (FamilyModel::benchmark_objective).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "family_model.h"
#include "family_objective_bench.h"
#include "family_registry.h"
#include "output_folder.h"
#include "serving_engines.h"
#include "toy_family.h"

using namespace dflash::drafter;
using dflash::families::testing::register_toy_family;
using dflash::families::testing::toy_family;
using Engines = std::vector<std::string>;

TEST(FamilyExportHooks, EachFamilyNamesTheEnginesThatServeIt) {
  register_toy_family();
  EXPECT_EQ(engines_for_family("dflash"), (Engines{"sglang", "vllm", "llama.cpp", "zlab", "speculators"}));
  EXPECT_EQ(engines_for_family("dspark"), (Engines{"sglang", "vllm", "llama.cpp"}));
  EXPECT_EQ(engines_for_family("dflash2"), (Engines{"sglang", "vllm", "llama.cpp", "zlab"}));
  EXPECT_EQ(engines_for_family("toy"), Engines{});  // no rows: no engine serves it
  EXPECT_EQ(engines_for_family("dflash3"), Engines{});
  ExportTraits t;
  t.family = "toy";
  EXPECT_EQ(engine_refusal(t, "vllm"), "does not serve the toy family");
  EXPECT_EQ(engines_serving(t), Engines{});
}

TEST(FamilyExportHooks, AFamilysColumnsApplyToItsOwnTraits) {
  ExportTraits t;
  t.family = "dspark";
  EXPECT_EQ(engines_serving(t), (Engines{"sglang", "vllm", "llama.cpp"}));
  t.markov_rank = 0;
  EXPECT_EQ(engine_refusal(t, "sglang"), "markov_rank 0: DSpark requires markov_rank > 0");
  EXPECT_EQ(engines_serving(t), Engines{});
  t = ExportTraits{};
  t.family = "dflash2";
  t.selector_top_k = 8;
  t.hidden_size = 64;  // < 8 x 9
  EXPECT_EQ(engines_serving(t), (Engines{"sglang", "vllm", "zlab"}));
  EXPECT_EQ(engine_refusal(t, "llama.cpp").rfind("selector_top_k 8 at hidden_size 64: its loader stores", 0), 0u);
  t.hidden_size = 72;
  EXPECT_EQ(engine_refusal(t, "llama.cpp"), "");
  // DFlash has neither column: the same traits are read as trained
  t.family = "dflash";
  t.hidden_size = 64;
  EXPECT_EQ(engines_serving(t).size(), 5u);
}

TEST(FamilyExportHooks, ARegisteredFamilysRemoteCodeBelongsToAnExportFolder) {
  namespace fs = std::filesystem;
  // (fs::remove per file: this binary links libtorch, whose copy of fs::remove_all the dynamic linker may pick)
  const fs::path d = fs::temp_directory_path() / ("dflash_family_export_" + std::to_string(::getpid()));
  const std::vector<std::string> files = {"config.json", "model.safetensors", "dflash.py", "dspark.py", "dflash2.py",
                                          "toy.py"};
  auto clean = [&] {
    std::error_code ec;
    for (const auto& f : files) fs::remove(d / f, ec);
    fs::remove(d, ec);
  };
  clean();
  fs::create_directories(d);
  std::ofstream(d / "config.json") << R"({"architectures": ["Qwen3DSparkModel"], "dflash_config": {}})";
  for (const char* f : {"model.safetensors", "dflash.py", "dspark.py", "dflash2.py"}) std::ofstream(d / f) << "x";
  // every built-in's files: an export of one family replaced by another's keeps counting as an export
  EXPECT_EQ(dflash::util::survey_folder(d.string()).content, dflash::util::FolderContent::DrafterExport);
  std::ofstream(d / "toy.py") << "x";  // no registered family writes it
  EXPECT_EQ(dflash::util::survey_folder(d.string()).content, dflash::util::FolderContent::Model);
  clean();
}

TEST(FamilyExportHooks, OnlyAFamilyWithItsOwnObjectiveBenchmarksIt) {
  register_toy_family();
  ObjectiveBenchSetup s;
  EXPECT_TRUE(model_of(*find_family("dflash")).benchmark_objective(s).is_null());
  EXPECT_TRUE(model_of(toy_family()).benchmark_objective(s).is_null());
  EXPECT_TRUE(model_of(*find_family("dflash2")).benchmark_objective(s).is_null());
}
