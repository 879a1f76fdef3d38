// RoPE settings of a Hugging Face config.json (target or drafter): the base `rope_theta` and the scaling that
// transformers applies to Llama and Qwen3 (`rope_type` default, linear, dynamic, yarn, llama3), read from either
// layout: transformers 5's `rope_parameters` {rope_theta, rope_type, ...} or the older top-level `rope_theta`
// plus `rope_scaling` {rope_type (or type), ...}. rope.h turns them into frequencies.
#pragma once
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "number_range.h"

namespace dflash::models {

struct RopeConfig {
  explicit RopeConfig(double base = 10000.0) : theta(base) {}

  double theta;
  std::string type = "default";  // "default", "linear", "dynamic", "yarn" or "llama3"
  // The scaling parameters as the config gave them (absent stays absent, so a config is written back unchanged);
  // which ones a type reads and their defaults are transformers' (modeling_rope_utils.py).
  std::optional<double> factor;                             // linear, dynamic, yarn, llama3
  std::optional<int64_t> original_max_position_embeddings;  // yarn (default: max_position_embeddings), llama3
  std::optional<double> attention_factor, beta_fast, beta_slow, mscale, mscale_all_dim;  // yarn
  std::optional<bool> truncate;                                                          // yarn (default true)
  std::optional<double> low_freq_factor, high_freq_factor;                               // llama3
  // Per-frequency divisors (llama.cpp's `rope_freqs.weight`, how GGUF stores llama3 scaling); empty: none.
  // Only a GGUF target has them; they have no config.json spelling.
  std::vector<double> freq_divisors;

  bool operator==(const RopeConfig& o) const;
};

// What is wrong with a RoPE setting, naming the field (`rope_parameters.factor`) but not the file: callers prefix it.
struct RopeConfigError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Reads the RoPE fields of a model config object `j` (the object holding rope_theta / rope_scaling /
// rope_parameters). `default_theta` when no theta is given. When both layouts are present they must agree
// (transformers 5 would take rope_scaling, transformers 4 rope_scaling and the top-level theta): a disagreement is
// an error, not a silent pick. `strict`: a key the type does not read is an error (a drafter config, which is
// written back: an unknown key would be dropped); otherwise it is ignored (a target's mrope_* and
// partial_rotary_factor, handled elsewhere). An unsupported rope_type (longrope, ...) is always an error.
// Validates the values (check_rope_config) with `max_position_embeddings` (0: unknown).
RopeConfig parse_rope_config(const nlohmann::json& j, double default_theta, int64_t max_position_embeddings,
                             bool strict);

// The range of each RoPE number (rope_theta and the scaling parameters), checked by check_rope_config and listed in
// docs/TARGET.md: finite, not subnormal, within [lo, hi].
struct RopeRange {
  std::string key;
  util::NumberRange range;
  std::string note;
};
const std::vector<RopeRange>& rope_ranges();
// rms_norm_eps of a target or drafter config: released models use 1e-5 or 1e-6; 0 divides by zero on a zero row.
inline util::NumberRange norm_eps_range() { return util::closed(1e-12, 1); }

// Throws RopeConfigError when the values cannot give frequencies: rope_theta and the scaling parameters within rope_ranges(),
// the parameters the type requires present, high_freq_factor > low_freq_factor, and the lengths dynamic and yarn
// need (max_position_embeddings, 0 when unknown, is dynamic's threshold and yarn's default original length).
// `field` names the parameters' object in messages.
void check_rope_config(const RopeConfig& r, int64_t max_position_embeddings,
                       const std::string& field = "rope_parameters");

// transformers 5's layout: {"rope_theta": ..., "rope_type": ..., the given scaling parameters}.
nlohmann::json rope_parameters_json(const RopeConfig& r);
// transformers 4's `rope_scaling`: the same without rope_theta (a top-level field there), null for "default".
nlohmann::json rope_scaling_json(const RopeConfig& r);

}  // namespace dflash::models
