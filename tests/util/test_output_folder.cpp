// The output-folder rule (output_folder.h): what a folder holds, from its entries, and which command may write
// into it. The command-line side (every folder writer, folders left unchanged): test_hostile_output_folders.py.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "error_of.h"
#include "output_folder.h"

namespace fs = std::filesystem;
using namespace dflash::util;

namespace {

fs::path folder_with(const std::string& name, const std::vector<std::string>& files, const std::string& config = "{}") {
  fs::path d = fs::temp_directory_path() / ("dflash_util_folder_" + std::to_string(::getpid()) + "_" + name);
  fs::remove_all(d);
  fs::create_directories(d);
  for (const auto& f : files) {
    if (!f.empty() && f.back() == '/') {
      fs::create_directories(d / f);
      continue;
    }
    std::ofstream(d / f) << (f == "config.json" ? config : "x");
  }
  return d;
}

const std::string kDrafterConfig = R"({"architectures": ["DFlashDraftModel"], "dflash_config": {}})";

}  // namespace

TEST(OutputFolder, SurveyNamesWhatAFolderHoldsAndTheEntryThatShowsIt) {
  add_export_file("dflash.py");  // what registering a family adds (drafter/family_registry.cpp): its remote code
  add_export_file("dflash.py");
  struct Case {
    std::vector<std::string> files;
    std::string config;
    FolderContent want;
    std::string evidence;
  };
  const std::vector<Case> cases = {
      {{}, "{}", FolderContent::Nothing, ""},
      {{"config.json", "model.safetensors"}, R"({"model_type": "llama"})", FolderContent::Model, "config.json"},
      {{"m.Q4_0.gguf"}, "{}", FolderContent::Model, "m.Q4_0.gguf"},
      {{"model-00001-of-00002.safetensors"}, "{}", FolderContent::Model, "model-00001-of-00002.safetensors"},
      {{"config.json", "model.safetensors", "dflash.py"}, kDrafterConfig, FolderContent::DrafterExport, "config.json"},
      // a modelling file no registered family writes: not an export of ours
      {{"config.json", "model.safetensors", "unknown_family.py"}, kDrafterConfig, FolderContent::Model, "config.json"},
      // a released drafter with a README is a model, not an earlier export
      {{"config.json", "model.safetensors", "README.md"}, kDrafterConfig, FolderContent::Model, "config.json"},
      {{"checkpoints/", "metrics.jsonl"}, "{}", FolderContent::Run, "checkpoints/"},
      {{"drafter_config.json"}, "{}", FolderContent::Run, "drafter_config.json"},
      {{"shard-00000.safetensors"}, "{}", FolderContent::Dataset, "shard-00000.safetensors"},
      {{"index-part0of2.json", "part0of2-00000.safetensors"}, "{}", FolderContent::Dataset, "index-part0of2.json"},
      {{"train.jsonl", "notes.txt"}, "{}", FolderContent::Dataset, "train.jsonl"},
      {{"notes.txt", "loss.png", "sub/"}, "{}", FolderContent::Other, "loss.png"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const fs::path d = folder_with("survey" + std::to_string(i), cases[i].files, cases[i].config);
    const FolderSurvey s = survey_folder(d.string());
    EXPECT_EQ(s.content, cases[i].want) << "case " << i;
    EXPECT_EQ(s.evidence, cases[i].evidence) << "case " << i;
  }
  EXPECT_EQ(survey_folder("/nonexistent/dflash").content, FolderContent::Nothing);
}

TEST(OutputFolder, EachUseReusesItsOwnKindAndRefusesTheRest) {
  const fs::path model = folder_with("model", {"config.json", "model.safetensors"}, R"({"model_type": "llama"})");
  const fs::path run = folder_with("run", {"checkpoints/", "drafter_config.json"});
  const fs::path data = folder_with("data", {"index.json"});
  const fs::path exp = folder_with("exp", {"config.json", "model.safetensors"}, kDrafterConfig);
  const fs::path other = folder_with("other", {"notes.txt"});
  const fs::path empty = folder_with("empty", {});
  auto err = [](const fs::path& d, OutputFolderUse use, bool force = false) {
    return error_of<std::invalid_argument>([&] { check_output_folder_use(d.string(), "--out", use, force); });
  };
  using U = OutputFolderUse;
  for (U use : {U::Export, U::Run, U::Dataset, U::Plots}) {
    EXPECT_EQ(err(empty, use), "");
    EXPECT_EQ(err(empty.string() + "/new", use), "");
  }
  EXPECT_EQ(err(exp, U::Export), "");
  EXPECT_EQ(err(other, U::Export, true), "");
  EXPECT_NE(err(other, U::Export).find("is a folder export did not make (it holds notes.txt)"), std::string::npos);
  for (bool force : {false, true}) {
    EXPECT_NE(err(model, U::Export, force).find("'" + model.string() + "' holds a model (config.json): an export never"),
              std::string::npos);
    EXPECT_NE(err(run, U::Export, force).find("holds a training run (checkpoints/)"), std::string::npos);
    EXPECT_NE(err(data, U::Export, force).find("holds a dataset (index.json)"), std::string::npos);
  }
  EXPECT_EQ(err(run, U::Run), "");
  EXPECT_EQ(err(other, U::Run), "");
  EXPECT_NE(err(model, U::Run).find("holds a model"), std::string::npos);
  EXPECT_NE(err(data, U::Run).find("holds a dataset"), std::string::npos);
  EXPECT_NE(err(exp, U::Run).find("holds an exported drafter"), std::string::npos);
  EXPECT_EQ(err(data, U::Dataset), "");
  EXPECT_NE(err(run, U::Dataset).find("holds a training run"), std::string::npos);
  EXPECT_NE(err(model, U::Dataset).find("holds a model"), std::string::npos);
  EXPECT_EQ(err(run, U::Plots), "");
  EXPECT_NE(err(model, U::Plots).find("holds a model"), std::string::npos);
  EXPECT_EQ(err(data, U::Plots), "");
  EXPECT_NE(err(exp, U::Plots).find("holds an exported drafter"), std::string::npos);
  // The path checks still come first.
  EXPECT_NE(err(model / "config.json", U::Export).find("is a file"), std::string::npos);
}
