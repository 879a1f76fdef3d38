#include "target_options.h"

#include <algorithm>
#include <filesystem>
#include <stdexcept>

#include "compute_settings.h"
#include "target_loader.h"

namespace dflash::models {

void add_target_options(util::Args& a, const TargetOptionSet& set) {
  a.option("target", "PATH", "", "target: a .gguf file or a Hugging Face folder (config.json + safetensors)");
  a.alias("model", "target");
  if (set.tokenizer)
    a.option("tokenizer", "PATH", "", "tokenizer (.gguf or tokenizer.json); default: the target's own");
  a.option("dtype", "DTYPE", set.dtype, "dtype the target computes in: fp32 | bf16 | fp16 | fp64");
  a.option("devices", "LAYOUT", "",
           set.replicas ? "pipeline stages separated by ',', replicas by ';' (quote it): 'cuda:0,cuda:1;cuda:2,cuda:3', "
                          "'cpu;cpu' (overrides --stages)"
                        : "one pipeline stage per device, e.g. cuda:0,cuda:1 (overrides --stages)");
  a.option("stages", "N", "1", "pipeline stages on the CPU (layers split evenly)");
  a.option("threads", "N", "0",
           set.replicas ? "intra-op threads in all, shared by the replicas' stage threads (0: every core)"
                        : "intra-op threads (0: every core)");
  if (set.eos) a.option("eos", "IDS", "config", "stop ids: config (model + tokenizer), none, or comma-separated ids");
}

TargetOptions read_target_options(const util::Args& a, const TargetOptionSet& set) {
  a.require("target");
  TargetOptions o;
  o.path = a.str("target");
  if (a.declared("tokenizer")) o.tokenizer = a.str("tokenizer");
  if (a.declared("eos")) o.eos = a.str("eos");
  const std::string cmd = a.command();
  o.dtype = ops::parse_dtype(a.str("dtype"), cmd + ": --dtype");
  const int64_t stages = a.i64("stages");
  if (stages < 1 || stages > 4096)
    throw std::invalid_argument(cmd + ": --stages expects 1 to 4096, got " + std::to_string(stages));
  if (a.given("devices")) a.refuse_given({"stages"}, "with --devices (the layout names the stages)");
  o.layout = a.given("devices") ? parse_device_layout(a.str("devices"), cmd + ": --devices") : cpu_layout(stages);
  if (!set.replicas && o.layout.num_replicas() > 1)
    throw std::invalid_argument(cmd + ": --devices '" + a.str("devices") + "' lists " +
                                std::to_string(o.layout.num_replicas()) + " replicas; " + set.single_replica_why +
                                ": give one replica (stages separated by ',', no ';')");
  o.threads = ops::set_threads(a.i64("threads"), cmd + ": --threads");
  return o;
}

TargetLoadOptions load_options(const TargetOptions& o, int64_t num_layers, size_t replica) {
  TargetLoadOptions l;
  l.dtype = o.dtype;
  const std::vector<at::Device>& devices = o.layout.replicas.at(replica);
  if (int64_t(devices.size()) > num_layers)
    throw std::invalid_argument("target: " + std::to_string(devices.size()) + " pipeline stages for " +
                                std::to_string(num_layers) + " layers (at most one stage per layer)");
  if (devices.size() > 1 || devices.front() != at::Device(at::kCPU))
    l.stages = split_layers(static_cast<int>(num_layers), devices);
  return l;
}

TargetModel load_target(const TargetOptions& o) {
  return load_target(o.path, load_options(o, read_target_config(o.path).num_hidden_layers));
}

std::vector<TargetModel> load_target_replicas(const TargetOptions& o) {
  std::vector<TargetModel> out;
  out.push_back(load_target(o));
  for (size_t r = 1; r < o.layout.replicas.size(); ++r) out.push_back(out.front().replicate(o.layout.replicas[r]));
  return out;
}

int64_t threads_per_thread(int64_t total, int64_t compute_threads) {
  return std::max<int64_t>(1, total / std::max<int64_t>(1, compute_threads));
}

std::unique_ptr<tok::Tokenizer> load_target_tokenizer(const std::string& target_path, const std::string& explicit_path) {
  namespace fs = std::filesystem;
  std::string path = explicit_path;
  if (path.empty()) {
    if (fs::is_regular_file(target_path)) path = target_path;  // a GGUF carries its vocabulary
    else if (fs::exists(fs::path(target_path) / "tokenizer.json")) path = (fs::path(target_path) / "tokenizer.json").string();
  }
  if (path.empty()) return nullptr;
  return std::make_unique<tok::Tokenizer>(tok::Tokenizer::load(path));
}

std::unique_ptr<tok::Tokenizer> load_target_tokenizer(const TargetOptions& o) {
  return load_target_tokenizer(o.path, o.tokenizer);
}

}  // namespace dflash::models
