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
#include "device_layout.h"
#include "target_model.h"
#include "tokenizer.h"

namespace dflash::models {

struct TargetOptions {
  std::string path;       // a .gguf file or a Hugging Face folder
  std::string tokenizer;  // "" = the target's own (GGUF metadata or PATH/tokenizer.json)
  at::ScalarType dtype = at::kFloat;
  DeviceLayout layout;    // replicas x pipeline stages (--devices; else --stages CPU stages of one replica)
  int64_t threads = 0;    // as set (resolved: never 0): the whole command's intra-op threads
  std::string eos = "config";  // config | none | comma-separated ids (data/target_io.h parses it)
};

struct TargetOptionSet {
  std::string dtype = "fp32";  // default of --dtype
  bool tokenizer = true;       // declare --tokenizer
  bool eos = true;             // declare --eos
  // Several replicas in --devices (data commands). Otherwise a ';' is refused with `single_replica_why`, the
  // reason this command runs one copy of the target.
  bool replicas = false;
  std::string single_replica_why = "this command runs one copy of the target";
};

void add_target_options(util::Args& a, const TargetOptionSet& set = {});
// Reads and checks the options (dtype, device layout, stage count, threads) and applies --threads to LibTorch.
TargetOptions read_target_options(const util::Args& a, const TargetOptionSet& set = {});

// The load options (dtype, pipeline stages over replica `replica`'s devices) for a target of `num_layers` layers.
TargetLoadOptions load_options(const TargetOptions& o, int64_t num_layers, size_t replica = 0);
// The first replica.
TargetModel load_target(const TargetOptions& o);
// Every replica of o.layout: the weights are read from disk once (replica 0) and copied to the others' devices
// (shared where a device repeats, e.g. cpu;cpu).
std::vector<TargetModel> load_target_replicas(const TargetOptions& o);
// Intra-op threads for each of `compute_threads` threads computing at once out of `total` (at least 1 each).
int64_t threads_per_thread(int64_t total, int64_t compute_threads);
// The target's tokenizer: --tokenizer, else the GGUF's own vocabulary or PATH/tokenizer.json; nullptr when there
// is none (prompts must then come as token ids).
std::unique_ptr<tok::Tokenizer> load_target_tokenizer(const TargetOptions& o);
std::unique_ptr<tok::Tokenizer> load_target_tokenizer(const std::string& target_path, const std::string& explicit_path);

}  // namespace dflash::models
