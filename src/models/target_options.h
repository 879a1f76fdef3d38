// The target options every command that loads a target shares, declared and read in one place so they are
// spelled the same everywhere: --target PATH (--model is an alias), --tokenizer, --dtype, --devices /
// --stages (pipeline stages), --threads, --eos. `dflash train` reads the same settings from its config
// (target, target_dtype, target_devices, threads), since there --dtype is the drafter's.
#pragma once
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "args.h"
#include "target_model.h"
#include "tokenizer.h"

namespace dflash::models {

struct TargetOptions {
  std::string path;       // a .gguf file or a Hugging Face folder
  std::string tokenizer;  // "" = the target's own (GGUF metadata or PATH/tokenizer.json)
  at::ScalarType dtype = at::kFloat;
  std::vector<at::Device> devices;  // one pipeline stage per device; empty = `stages` stages on the CPU
  int64_t stages = 1;
  int64_t threads = 0;    // as set (resolved: never 0)
  std::string eos = "config";  // config | none | comma-separated ids (data/target_io.h parses it)
};

struct TargetOptionSet {
  std::string dtype = "fp32";  // default of --dtype
  bool tokenizer = true;       // declare --tokenizer
  bool eos = true;             // declare --eos
};

void add_target_options(util::Args& a, const TargetOptionSet& set = {});
// Reads and checks the options (dtype and device names, stage count, threads) and applies --threads to LibTorch.
TargetOptions read_target_options(const util::Args& a);

// The load options (dtype, pipeline stages over the devices) for a target of `num_layers` layers.
TargetLoadOptions load_options(const TargetOptions& o, int64_t num_layers);
TargetModel load_target(const TargetOptions& o);
// The target's tokenizer: --tokenizer, else the GGUF's own vocabulary or PATH/tokenizer.json; nullptr when there
// is none (prompts must then come as token ids).
std::unique_ptr<tok::Tokenizer> load_target_tokenizer(const TargetOptions& o);
std::unique_ptr<tok::Tokenizer> load_target_tokenizer(const std::string& target_path, const std::string& explicit_path);

}  // namespace dflash::models
