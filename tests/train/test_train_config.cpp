// `dflash train` settings files: YAML and JSON give identical configs; unknown keys, wrong types and
// malformed files give errors naming the file, line, key and expectation; flags override both; the
// dist_backend choice.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <fstream>
#include <functional>
#include <limits>
#include <string>

#include <ATen/ATen.h>

#include "distributed.h"
#include "error_of.h"
#include "family_registry.h"
#include "train_config.h"

using namespace dflash::train;

namespace {

std::string write_file(const std::string& name, const std::string& text) {
  const std::string path = "/tmp/dflash_cfg_" + std::to_string(::getpid()) + "_" + name;
  std::ofstream(path) << text;
  return path;
}

TrainConfig from_file(const std::string& path) {
  TrainConfig c;
  apply_config_file(c, path);
  return c;
}

// Every field set away from its default, so a field the YAML reader drops or misreads shows.
TrainConfig all_fields_changed() {
  TrainConfig c;
  c.target = "models/t.gguf";
  c.data = "data/dir";
  c.data_format = dflash::data::SampleFormat::Dflash;
  c.out = "runs/a b";
  c.drafter_config = "d.json";
  c.drafter_layers = 3;
  c.target_layer_ids = {1, 9, 17};
  c.mask_token_id = 151669;
  c.block_size = 8;
  c.steps = 1000;
  c.epochs = 2;
  c.batch_size = 4;
  c.grad_accum = 2;
  c.max_len = 2048;
  c.lr = 3e-4;
  c.warmup_ratio = 0.1;
  c.min_lr_ratio = 0.05;
  c.weight_decay = 0.01;
  c.beta1 = 0.8;
  c.beta2 = 0.95;
  c.eps = 1e-6;
  c.clip = 0.5;
  c.seed = 7;
  c.num_anchors = 256;
  c.gamma = 5.5;
  c.loss_decay = dflash::drafter::LossDecay::None;  // (validate() would refuse it with gamma 5.5; this only checks the readers)
  c.kl_weight = 0.25;
  c.dtype = dflash::util::Dtype::F32;
  c.target_dtype = dflash::util::Dtype::BF16;
  c.activation_checkpoint = dflash::drafter::CheckpointPolicy{2};
  c.loss_chunk_rows = 256;
  c.drafter_devices = dflash::util::read_device_list_setting("cuda:0,cuda:1", "test");
  c.target_devices = dflash::util::read_device_grid_setting("cuda:2", "test");
  c.dist_backend = "nccl";
  c.checkpoint_every = 50;
  c.keep_checkpoints = 3;
  c.log_every = 5;
  c.threads = 4;
  c.budget = dflash::util::parse_byte_size("90GB", "budget");
  c.attention_backend = dflash::ops::AttentionBackend::Reference;
  c.queue_depth = 4;
  c.init_std = 0.01;
  c.init_final_norm = 0.25;
  c.stop_after = 10;
  c.resume = true;
  c.deterministic = true;
  c.drafter_family = dflash::drafter::family_named("dspark", "test");
  // The families' own settings (drafter/family_train_settings.h), set as a settings file sets them.
  apply_json(c,
             {{"markov_rank", 8}, {"markov_head_type", "rnn"}, {"enable_confidence_head", false},
              {"confidence_head_with_markov", false}, {"ce_loss_weight", 1.0}, {"l1_loss_weight", 0.5},
              {"confidence_loss_weight", 0.0}, {"conv_kernel_size", 3}, {"conv_group_size", 8}, {"selector_rank", 32},
              {"selector_top_k", 8}, {"selector_candidates", "inject"}, {"selector_stop_gradient", true},
              {"selector_loss_weight", 0.5}},
             "test");
  c.given_from.clear();
  c.init_from = "start.safetensors";
  c.report_to = *report_to_from_text("tensorboard,wandb");
  c.report_project = "drafters";
  c.report_run_name = "lr-3e-4";
  c.tensorboard_dir = "tb";
  c.wandb_mode = "online";
  c.wandb_dir = "wb";
  c.mlflow_tracking_uri = "runs/mlflow";
  c.swanlab_mode = "offline";
  c.swanlab_logdir = "sl";
  return c;
}

}  // namespace

TEST(YamlConfig, EveryFieldReadsAsInJson) {
  if (!have_yaml()) GTEST_SKIP() << "built without yaml-cpp";
  const TrainConfig want = all_fields_changed();
  const nlohmann::json j = to_json(want);
  ASSERT_EQ(j.size(), train_fields().size());
  // YAML written the way people write it: plain scalars, no quotes (the out path has a space, fine in YAML).
  std::string yaml = "# every setting\n";
  for (const auto& [k, v] : j.items()) yaml += k + ": " + (v.is_string() ? v.get<std::string>() : v.dump()) + "\n";
  const TrainConfig from_yaml = from_file(write_file("all.yaml", yaml));
  const TrainConfig from_json = from_file(write_file("all.json", j.dump(2)));
  EXPECT_EQ(to_json(from_yaml), j) << yaml;
  EXPECT_EQ(to_json(from_json), j);
}

TEST(YamlConfig, HandWrittenFileEqualsJson) {
  if (!have_yaml()) GTEST_SKIP() << "built without yaml-cpp";
  const std::string yaml = R"(# a comment
target: models/smollm2/SmolLM2-135M-Instruct-Q8_0.gguf
data: data/regen.jsonl
out: "runs/smollm2"      # quoted strings work too
mask_token_id: 0
target_layer_ids: [1, 15, 28]
drafter_devices:
  - cpu
  - cpu
lr: 6.0e-4
steps: 200
resume: false
budget: 90GB
)";
  const std::string json = R"({"target": "models/smollm2/SmolLM2-135M-Instruct-Q8_0.gguf",
    "data": "data/regen.jsonl", "out": "runs/smollm2", "mask_token_id": 0, "target_layer_ids": [1, 15, 28],
    "drafter_devices": ["cpu", "cpu"], "lr": 6.0e-4, "steps": 200, "resume": false, "budget": "90GB"})";
  const TrainConfig y = from_file(write_file("hand.yml", yaml)), j = from_file(write_file("hand.json", json));
  EXPECT_EQ(to_json(y), to_json(j));
  EXPECT_EQ(y.target_layer_ids, (std::vector<int64_t>{1, 15, 28}));
  EXPECT_EQ(y.drafter_devices.text, "cpu,cpu");  // parsed once, when read
  EXPECT_EQ(y.drafter_devices.devices.size(), 2u);
  EXPECT_DOUBLE_EQ(y.lr, 6e-4);
  // Without a telling extension, the content decides.
  EXPECT_EQ(to_json(from_file(write_file("hand_yaml_noext", yaml))), to_json(j));
  EXPECT_EQ(to_json(from_file(write_file("hand_json_noext", json))), to_json(j));
  // An empty YAML file (or only comments) sets nothing.
  EXPECT_EQ(to_json(from_file(write_file("empty.yaml", "# nothing\n"))), to_json(TrainConfig{}));
}

TEST(YamlConfig, ErrorsNameFileLineKeyAndExpectation) {
  if (!have_yaml()) GTEST_SKIP() << "built without yaml-cpp";
  const std::string unknown = write_file("unknown.yaml", "lr: 1e-3\n\nnum_anchor: 5\n");
  std::string e = error_of<std::invalid_argument>([&] { from_file(unknown); });
  EXPECT_NE(e.find(unknown + ":3: unknown key 'num_anchor' (valid keys: target, data,"), std::string::npos) << e;
  EXPECT_NE(e.find("num_anchors"), std::string::npos) << e;

  const std::string type = write_file("type.yaml", "steps: 10\nlr: fast\n");
  e = error_of<std::invalid_argument>([&] { from_file(type); });
  EXPECT_EQ(e, type + ":2: key 'lr' expects a number, got \"fast\"");
  e = error_of<std::invalid_argument>([&] { from_file(write_file("int.yaml", "steps: 1.5\n")); });
  EXPECT_NE(e.find(":1: key 'steps' expects an integer, got \"1.5\""), std::string::npos) << e;
  e = error_of<std::invalid_argument>([&] { from_file(write_file("quoted.yaml", "steps: \"10\"\n")); });  // quoted: a string, as in JSON
  EXPECT_NE(e.find("key 'steps' expects an integer"), std::string::npos) << e;
  e = error_of<std::invalid_argument>([&] { from_file(write_file("bool.yaml", "resume: maybe\n")); });
  EXPECT_NE(e.find(":1: key 'resume' expects true or false, got \"maybe\""), std::string::npos) << e;
  e = error_of<std::invalid_argument>([&] { from_file(write_file("map.yaml", "drafter_devices:\n  a: 1\n")); });
  EXPECT_NE(e.find(":1: key 'drafter_devices' expects a string"), std::string::npos) << e;
  e = error_of<std::invalid_argument>([&] { from_file(write_file("null.yaml", "lr:\n")); });
  EXPECT_NE(e.find(":1: key 'lr' expects a number, got null"), std::string::npos) << e;
  e = error_of<std::invalid_argument>([&] { from_file(write_file("twice.yaml", "lr: 1\nlr: 2\n")); });
  EXPECT_NE(e.find(":2: key 'lr' is given twice"), std::string::npos) << e;

  const std::string bad = write_file("bad.yaml", "lr: 1e-3\nsteps: [1, 2\n");
  e = error_of<std::invalid_argument>([&] { from_file(bad); });
  EXPECT_EQ(e.rfind(bad + ":", 0), 0u) << e;
  EXPECT_NE(e.find("invalid YAML"), std::string::npos) << e;
  e = error_of<std::invalid_argument>([&] { from_file(write_file("list.yaml", "- lr\n- steps\n")); });
  EXPECT_NE(e.find(":1: expected a YAML mapping of settings"), std::string::npos) << e;
  e = error_of<std::invalid_argument>([&] { from_file(write_file("bad.json", "{\"lr\": 1,}")); });
  EXPECT_NE(e.find("bad.json: not valid JSON"), std::string::npos) << e;
  e = error_of<std::invalid_argument>([&] { from_file("/nonexistent/c.yaml"); });
  EXPECT_EQ(e, "/nonexistent/c.yaml: cannot open for reading: No such file or directory (the config file)");
}

TEST(YamlConfig, FlagsOverrideTheFile) {
  if (!have_yaml()) GTEST_SKIP() << "built without yaml-cpp";
  const std::string f = write_file("flags.yaml", "lr: 1e-3\nnum_anchors: 3\ndist_backend: gloo\n");
  TrainConfig c;
  ASSERT_TRUE(parse_train_args({"--config", f, "--lr", "2e-3"}, c));
  EXPECT_DOUBLE_EQ(c.lr, 2e-3);
  EXPECT_EQ(c.num_anchors, 3);
  EXPECT_EQ(c.dist_backend, "gloo");
}

TEST(DistBackend, ChoiceAndErrors) {
  TrainConfig c;
  c.target = "t";
  c.data = "d";
  c.out = "o";
  c.dist_backend = "mpi";
  const std::string e = error_of<std::invalid_argument>([&] { c.validate(); });
  EXPECT_EQ(e, "train config: 'dist_backend' must be auto, gloo or nccl, got 'mpi'");
  EXPECT_EQ(resolve_backend("auto", at::kCPU), "gloo");
  EXPECT_EQ(resolve_backend("gloo", at::Device("cuda:0")), "gloo");
  EXPECT_EQ(resolve_backend("auto", at::Device("cuda:0")), have_nccl() ? "nccl" : "gloo");
  EXPECT_NE(error_of<std::invalid_argument>([] { resolve_backend("nccl", at::kCPU); }).find("needs every drafter device to be CUDA"),
            std::string::npos);
  if (have_nccl()) EXPECT_EQ(resolve_backend("nccl", at::Device("cuda:1")), "nccl");
}

// report_to: none or each tracker once; a flag, a JSON list and the saved text read the same; the trackers' modes.
TEST(ReportTo, SpellingsAndErrors) {
  EXPECT_FALSE(report_to_from_text("")->any());
  EXPECT_FALSE(report_to_from_text("none")->any());
  EXPECT_EQ(report_to_from_text("mlflow,tensorboard")->trackers, (std::vector<std::string>{"mlflow", "tensorboard"}));
  for (const char* bad : {"comet", "wandb,wandb", "wandb,", ",wandb", "none,wandb", "TensorBoard"})
    EXPECT_FALSE(report_to_from_text(bad).has_value()) << bad;
  TrainConfig flags, file;
  ASSERT_TRUE(parse_train_args({"--report-to", "tensorboard,swanlab"}, flags));
  apply_json(file, {{"report_to", {"tensorboard", "swanlab"}}}, "c.json");
  EXPECT_EQ(flags.report_to, file.report_to);
  EXPECT_EQ(to_json(flags)["report_to"], "tensorboard,swanlab");
  EXPECT_EQ(to_json(TrainConfig{})["report_to"], "none");
  TrainConfig c;
  EXPECT_EQ(error_of<std::invalid_argument>([&] { apply_json(c, {{"report_to", "wandb,comet"}}, "c.json"); }),
            "c.json: 'report_to' must be none or a comma list of tensorboard, wandb, mlflow, swanlab (each once), got "
            "'wandb,comet'");
  c.target = "t";
  c.data = "d";
  c.out = "o";
  c.wandb_mode = "disabled";
  EXPECT_EQ(error_of<std::invalid_argument>([&] { c.validate(); }),
            "train config: 'wandb_mode' must be offline or online, got 'disabled'");
  c.wandb_mode = "online";
  c.swanlab_mode = "cloud";
  EXPECT_EQ(error_of<std::invalid_argument>([&] { c.validate(); }),
            "train config: 'swanlab_mode' must be local, offline or online, got 'cloud'");
}

// Hostile settings files (issue 19): what JSON and YAML used to accept silently is now an error naming the key.
TEST(TrainConfigFiles, DuplicateKeysAndSecondDocumentsAreErrors) {
  std::string e = error_of<std::invalid_argument>([&] { from_file(write_file("dup.json", R"({"lr": 1e-3, "steps": 5, "lr": 2e-3})")); });
  EXPECT_NE(e.find("dup.json: key 'lr' appears twice in one object"), std::string::npos) << e;
  if (!have_yaml()) return;
  e = error_of<std::invalid_argument>([&] { from_file(write_file("two_docs.yaml", "lr: 1e-3\n---\nsteps: 5\n")); });
  EXPECT_NE(e.find("two_docs.yaml:2: a second YAML document"), std::string::npos) << e;
  e = error_of<std::invalid_argument>([&] { from_file(write_file("ended.yaml", "lr: 1e-3\n...\nsteps: 5\n")); });
  EXPECT_NE(e.find("ended.yaml:3: a second YAML document"), std::string::npos) << e;
  // A leading document marker is still one document; "---" inside a block scalar is no marker.
  EXPECT_DOUBLE_EQ(from_file(write_file("marker.yaml", "---\nlr: 1e-3\n")).lr, 1e-3);
  EXPECT_EQ(from_file(write_file("block.yaml", "out: |\n  ---\n  runs\n")).out, "---\nruns\n");
  // yaml-cpp reads ",x" as an empty document (and its LoadAll loops forever on it): an error here.
  // A value that is not UTF-8 is named (the message used to fail to print it: nlohmann's dump throws on it).
  e = error_of<std::invalid_argument>([&] { from_file(write_file("latin1.yaml", "lr: caf\xe9\n")); });
  EXPECT_NE(e.find("latin1.yaml:1: key 'lr' expects a number, got \"caf"), std::string::npos) << e;
  e = error_of<std::invalid_argument>([&] { from_file(write_file("comma.yaml", ",x\n")); });
  EXPECT_NE(e.find("comma.yaml: invalid YAML"), std::string::npos) << e;
}

TEST(TrainConfigFiles, IntegersAreShownAsWritten) {
  // 2^64-1 used to become -1 (and be reported as -1).
  std::string e = error_of<std::invalid_argument>([&] { from_file(write_file("huge.json", R"({"steps": 18446744073709551615})")); });
  EXPECT_NE(e.find("key 'steps' expects an integer within int64, got 18446744073709551615"), std::string::npos) << e;
  if (have_yaml()) {
    e = error_of<std::invalid_argument>([&] { from_file(write_file("huge.yaml", "steps: 18446744073709551615\n")); });
    EXPECT_NE(e.find(":1: key 'steps' expects an integer, got \"18446744073709551615\""), std::string::npos) << e;
  }
  TrainConfig c;
  e = error_of<std::invalid_argument>([&] { parse_train_args({"--steps", "18446744073709551615"}, c); });
  EXPECT_NE(e.find("--steps expects an integer, got '18446744073709551615'"), std::string::npos) << e;
}

TEST(TrainConfigFiles, OutOfRangeSettingsNameTheLimit) {
  auto valid = [] {
    TrainConfig c;
    c.target = "t";
    c.data = "d";
    c.out = "o";
    return c;
  };
  EXPECT_EQ(error_of<std::invalid_argument>([&] { valid().validate(); }), "");
  auto err = [&](const std::function<void(TrainConfig&)>& set) {
    TrainConfig c = valid();
    return error_of<std::invalid_argument>([&] {
      set(c);
      c.validate();
    });
  };
  // A setting written as text is read into its type (and refused) when it is set, as a file or flag sets it.
  auto set_text = [](TrainConfig& c, const std::string& key, const std::string& text) {
    apply_json(c, nlohmann::json{{key, text}}, "train config");
  };
  EXPECT_EQ(err([](TrainConfig& c) { c.threads = 1000000; }),
            "train config: 'threads' must be in [0, 1024] (0: cores / workers), got 1000000");
  EXPECT_EQ(err([](TrainConfig& c) { c.batch_size = 1 << 20; }), "train config: 'batch_size' must be in [1, 65536], got 1048576");
  EXPECT_EQ(err([](TrainConfig& c) { c.num_anchors = 5000; }),
            "train config: 'num_anchors' must be in [1, 4096] (at most one anchor per position of max_len), got 5000");
  EXPECT_EQ(err([](TrainConfig& c) { c.drafter_layers = (int64_t(1) << 32) + 1; }),
            "train config: 'drafter_layers' must be in [1, 256], got 4294967297");
  EXPECT_EQ(err([](TrainConfig& c) { c.steps = -1; }), "train config: 'steps' must be in [0, 1000000000000], got -1");
  EXPECT_EQ(err([](TrainConfig& c) { c.lr = -1e-9; }), "train config: 'lr' must be a finite number in [1e-12, 10], got -1e-09");
  EXPECT_EQ(err([](TrainConfig& c) { c.lr = std::numeric_limits<double>::infinity(); }),
            "train config: 'lr' must be a finite number in [1e-12, 10], got inf");
  EXPECT_EQ(err([](TrainConfig& c) { c.clip = std::nan(""); }),
            "train config: 'clip' must be a finite number in [0, 1000000] (0: off), got nan");
  // Subnormal and absurd values are outside every range (they made NaN tables or training that "diverged").
  EXPECT_EQ(err([](TrainConfig& c) { c.lr = 1e-310; }), "train config: 'lr' must be a finite number in [1e-12, 10], got 1e-310");
  EXPECT_EQ(err([](TrainConfig& c) { c.init_std = 1e308; }),
            "train config: 'init_std' must be a finite number in [1e-08, 10], got 1e+308");
  EXPECT_EQ(err([](TrainConfig& c) { c.gamma = 1e300; }),
            "train config: 'gamma' must be a finite number in [0, 10000] (0: by block size), got 1e+300");
  EXPECT_EQ(err([&](TrainConfig& c) { set_text(c, "target_layer_ids", "1,9,1"); }),
            "train config: 'target_layer_ids' must be a list without repeats, got '1,9,1' (layer 1 twice)");
  EXPECT_NE(err([&](TrainConfig& c) { set_text(c, "target_layer_ids", "1,x"); }).find("comma list of layer indices"),
            std::string::npos);
  EXPECT_EQ(err([&](TrainConfig& c) { set_text(c, "loss_decay", "off"); }),
            "train config: 'loss_decay' must be exp or none, got 'off'");
  EXPECT_EQ(err([](TrainConfig& c) { c.loss_decay = dflash::drafter::LossDecay::None, c.gamma = 7; }),
            "train config: 'gamma' must be 0 (unset) with loss_decay none (no decay, no gamma), got 7.0");
  EXPECT_EQ(err([](TrainConfig& c) { c.loss_decay = dflash::drafter::LossDecay::None; }), "");
  // A flag that says inf is refused by validate() the same way.
  TrainConfig c;
  ASSERT_TRUE(parse_train_args({"--target", "t", "--data", "d", "--out", "o", "--lr", "inf"}, c));
  EXPECT_EQ(error_of<std::invalid_argument>([&] { c.validate(); }),
            "train config: 'lr' must be a finite number in [1e-12, 10], got inf");
}

TEST(TrainConfigFiles, NonRegularConfigFilesAreRefusedAtOnce) {
  const std::string fifo = "/tmp/dflash_cfg_" + std::to_string(::getpid()) + "_fifo.yaml";
  ::unlink(fifo.c_str());
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const std::string e = error_of<std::invalid_argument>([&] { from_file(fifo); });  // used to block forever
  EXPECT_NE(e.find(fifo + ": is a FIFO (named pipe), expected a regular file"), std::string::npos) << e;
  ::unlink(fifo.c_str());
}

// `dflash train --resume`: the command line is read once; the run's saved settings come first, then the --config
// file and the flags given now, and a pause (stop_after) is not carried over.
TEST(TrainArgs, ResumeLaysTheFileAndFlagsOverTheSavedSettings) {
  const std::string dir = "/tmp/dflash_cfg_" + std::to_string(::getpid()) + "_resume";
  ::mkdir(dir.c_str(), 0755);
  TrainConfig saved;
  saved.target = "t";
  saved.data = "d";
  saved.out = dir;
  saved.lr = 1e-3;
  saved.num_anchors = 7;
  saved.stop_after = 5;
  saved.activation_checkpoint = dflash::drafter::CheckpointPolicy{2};
  std::ofstream(dir + "/train_config.json") << to_json(saved).dump();
  const std::string file = write_file("resume.json", R"({"num_anchors": 9})");
  TrainArgs args;
  ASSERT_TRUE(read_train_args({"--config", file, "--resume", "--out", dir, "--lr", "2e-3"}, args));
  const TrainConfig c = train_config_of(args);
  EXPECT_TRUE(c.resume);
  EXPECT_EQ(c.target, "t");                                             // saved
  EXPECT_EQ(c.activation_checkpoint, dflash::drafter::CheckpointPolicy{2});  // saved, typed
  EXPECT_EQ(c.num_anchors, 9);                                          // the file given now
  EXPECT_DOUBLE_EQ(c.lr, 2e-3);                                         // the flag given now
  EXPECT_EQ(c.stop_after, 0);
  // Without --resume: the file and the flags over the defaults.
  TrainArgs fresh;
  ASSERT_TRUE(read_train_args({"--config", file}, fresh));
  EXPECT_EQ(train_config_of(fresh).num_anchors, 9);
  EXPECT_DOUBLE_EQ(train_config_of(fresh).lr, TrainConfig{}.lr);
  EXPECT_NE(error_of<std::invalid_argument>([&] {
              TrainArgs no_out;
              read_train_args({"--resume"}, no_out);
              train_config_of(no_out);
            }).find("--resume needs --out"),
            std::string::npos);
}
