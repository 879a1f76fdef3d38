// `dflash target rope` (internal, for tests): the RoPE frequencies and cos/sin tables rope.h computes for a
// config.json, so tests can hold them against transformers' own functions.
#include <ATen/ATen.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "args.h"
#include "atomic_output.h"
#include "dtype_names.h"
#include "input_file.h"
#include "models_commands.h"
#include "rope.h"
#include "safetensors.h"
#include "strict_json.h"

namespace dflash::models {

int target_rope_main(const std::vector<std::string>& args) {
  util::Args a("target rope", "RoPE frequencies and cos/sin tables of a config.json (tests)");
  a.option("config", "FILE", "", "a config.json (rope_theta, rope_scaling / rope_parameters, head_dim, ...)");
  a.option("positions", "LIST", "0", "comma-separated positions of one forward (dynamic reads the largest)");
  a.option("dtype", "DTYPE", "fp32", "arithmetic of the frequencies: fp32 (transformers') or fp64 (the drafter's)");
  a.option("out", "FILE", "", "safetensors to write: inv_freq, attention_scaling, cos, sin");
  if (!a.parse(args)) return 0;
  if (a.given("out")) io::check_output_path(a.str("out"), "target rope: --out");  // before any work
  a.require("config");
  a.require("out");
  const util::Dtype dtype = util::parse_dtype(a.str("dtype"), "target rope: --dtype");
  if (dtype != util::Dtype::F32 && dtype != util::Dtype::F64)
    throw std::invalid_argument("target rope: --dtype must be fp32 or fp64");
  const std::string path = a.str("config");
  nlohmann::json j;
  try {
    j = io::parse_json_strict(io::read_regular_file(path, 64 << 20));
  } catch (const std::exception& e) {
    throw std::invalid_argument(path + ": " + e.what());
  }
  const int64_t heads = j.value("num_attention_heads", int64_t(1));
  const int64_t dim = j.contains("head_dim") ? j["head_dim"].get<int64_t>() : j.value("hidden_size", int64_t(0)) / heads;
  const int64_t max_positions = j.value("max_position_embeddings", int64_t(0));
  RopeConfig rope;
  try {
    rope = parse_rope_config(j, 10000.0, max_positions, /*strict=*/false);
  } catch (const RopeConfigError& e) {
    throw std::invalid_argument(path + ": " + e.what());
  }
  const std::vector<int64_t> positions = a.i64_list("positions");
  if (positions.empty()) throw std::invalid_argument("target rope: --positions is empty");
  const int64_t seq_len = *std::max_element(positions.begin(), positions.end()) + 1;
  const RopeFrequencies f =
      rope_frequencies(rope, dim, max_positions, seq_len, dtype == util::Dtype::F64 ? at::kDouble : at::kFloat);
  auto [cos, sin] = rope_cos_sin_at(f, at::tensor(positions, at::kLong));
  io::save_safetensors(a.str("out"), {{"inv_freq", f.inv_freq},
                                      {"attention_scaling", at::tensor({f.attention_scaling}, at::kDouble)},
                                      {"cos", cos},
                                      {"sin", sin}});
  return 0;
}

}  // namespace dflash::models
