#include "rope_config.h"

#include <algorithm>
#include <cmath>

#include <nlohmann/json.hpp>

#include "number_range.h"
#include "strict_json.h"

namespace dflash::models {
namespace {

using nlohmann::json;

[[noreturn]] void fail(const std::string& field, const std::string& expected, const std::string& got) {
  throw RopeConfigError("field '" + field + "': expected " + expected + ", got " + got);
}

std::string shown(double v) { return std::isfinite(v) ? json(v).dump() : util::number_text(v); }

// The keys each type reads (transformers' _validate_<type>_rope_parameters), beside rope_theta / rope_type / type.
const std::vector<std::string>& keys_of(const std::string& type) {
  static const std::vector<std::string> none, factor_only = {"factor"},
                                              yarn = {"factor", "original_max_position_embeddings", "attention_factor",
                                                      "beta_fast", "beta_slow", "mscale", "mscale_all_dim", "truncate"},
                                              llama3 = {"factor", "original_max_position_embeddings",
                                                        "low_freq_factor", "high_freq_factor"};
  if (type == "linear" || type == "dynamic") return factor_only;
  if (type == "yarn") return yarn;
  if (type == "llama3") return llama3;
  return none;
}

std::string name(const std::string& field, const std::string& key) { return field.empty() ? key : field + "." + key; }

std::optional<double> number(const json& p, const std::string& field, const char* key) {
  if (!p.contains(key) || p[key].is_null()) return std::nullopt;
  if (!p[key].is_number()) fail(name(field, key), "a number", io::json_shown(p[key]));
  return p[key].get<double>();
}

// One layout's object `p` (found under `field`); `theta` when it holds no rope_theta.
RopeConfig parse_one(const json& p, const std::string& field, double theta, bool strict) {
  if (!p.is_object()) fail(field, "an object or null", io::json_shown(p));
  RopeConfig r(number(p, field, "rope_theta").value_or(theta));
  std::string type_key = "rope_type";
  for (const char* key : {"type", "rope_type"}) {  // transformers: rope_type, else the older `type`
    if (!p.contains(key) || p[key].is_null()) continue;
    if (!p[key].is_string()) fail(field + "." + key, "a string", io::json_shown(p[key]));
    if (std::string(key) == "rope_type" && p.contains("type") && p["type"].is_string() && p["type"] != p[key])
      fail(field + ".rope_type", "the same type as " + field + ".type (" + p["type"].dump() + ")", p[key].dump());
    r.type = p[key].get<std::string>();
    type_key = key;
  }
  const std::string types[] = {"default", "linear", "dynamic", "yarn", "llama3"};
  if (std::find(std::begin(types), std::end(types), r.type) == std::end(types))
    fail(field + "." + type_key, "one of \"default\", \"linear\", \"dynamic\", \"yarn\", \"llama3\" (the RoPE types "
         "of Llama and Qwen3 that dflash implements)", "\"" + r.type + "\"");
  const auto& keys = keys_of(r.type);
  if (strict) {
    for (auto it = p.begin(); it != p.end(); ++it) {
      const std::string& k = it.key();
      if (k == "rope_theta" || k == "rope_type" || k == "type" || std::count(keys.begin(), keys.end(), k)) continue;
      std::string known = "rope_theta, rope_type";
      for (const auto& x : keys) known += ", " + x;
      fail(field + "." + k, "no such key for rope_type \"" + r.type + "\" (it reads " + known + ")",
           io::json_shown(it.value()));
    }
  }
  auto has = [&](const char* k) { return std::count(keys.begin(), keys.end(), k) > 0; };
  if (has("factor")) r.factor = number(p, field, "factor");
  if (has("original_max_position_embeddings") && p.contains("original_max_position_embeddings") &&
      !p["original_max_position_embeddings"].is_null()) {
    const auto v = io::json_integer_in(p["original_max_position_embeddings"], 1, 2147483647);
    if (!v) fail(field + ".original_max_position_embeddings", "an integer in [1, 2147483647]",
                 io::json_shown(p["original_max_position_embeddings"]));
    r.original_max_position_embeddings = *v;
  }
  if (has("attention_factor")) r.attention_factor = number(p, field, "attention_factor");
  if (has("beta_fast")) r.beta_fast = number(p, field, "beta_fast");
  if (has("beta_slow")) r.beta_slow = number(p, field, "beta_slow");
  if (has("mscale")) r.mscale = number(p, field, "mscale");
  if (has("mscale_all_dim")) r.mscale_all_dim = number(p, field, "mscale_all_dim");
  if (has("low_freq_factor")) r.low_freq_factor = number(p, field, "low_freq_factor");
  if (has("high_freq_factor")) r.high_freq_factor = number(p, field, "high_freq_factor");
  if (has("truncate") && p.contains("truncate") && !p["truncate"].is_null()) {
    if (!p["truncate"].is_boolean()) fail(field + ".truncate", "true or false", io::json_shown(p["truncate"]));
    r.truncate = p["truncate"].get<bool>();
  }
  return r;
}

}  // namespace

bool RopeConfig::operator==(const RopeConfig& o) const {
  return theta == o.theta && type == o.type && factor == o.factor &&
         original_max_position_embeddings == o.original_max_position_embeddings &&
         attention_factor == o.attention_factor && beta_fast == o.beta_fast && beta_slow == o.beta_slow &&
         mscale == o.mscale && mscale_all_dim == o.mscale_all_dim && truncate == o.truncate &&
         low_freq_factor == o.low_freq_factor && high_freq_factor == o.high_freq_factor &&
         freq_divisors == o.freq_divisors;
}

const std::vector<RopeRange>& rope_ranges() {
  // Wide enough for every released model (theta 1e4..1e8; factor 2..64; yarn attention_factor ~1, beta_fast 32,
  // beta_slow 1, mscale ~0.7..1; llama3 low 1, high 4) and narrow enough that the float32 frequency tables of
  // every position up to 2^31 stay finite: a factor of 1e-39 or a subnormal theta gave NaN tables (exit 0).
  static const std::vector<RopeRange> r = {
      {"rope_theta", util::above(1, 1e12), ""},
      {"factor", util::closed(1e-3, 1e6), ""},
      {"attention_factor", util::closed(1e-3, 100), ""},
      {"beta_fast", util::closed(0, 1e4), " (0: the default 32)"},
      {"beta_slow", util::closed(0, 1e4), " (0: the default 1)"},
      {"mscale", util::closed(0, 100), ""},
      {"mscale_all_dim", util::closed(0, 100), ""},
      {"low_freq_factor", util::closed(1e-3, 1e3), ""},
      {"high_freq_factor", util::closed(1e-3, 1e3), ""},
  };
  return r;
}

void check_rope_config(const RopeConfig& r, int64_t max_positions, const std::string& f) {
  auto in_range = [&](const std::string& key, const std::optional<double>& v) {
    if (!v) return;
    for (const RopeRange& x : rope_ranges())
      if (x.key == key)
        if (const auto e = util::out_of_range(*v, x.range, x.note))
          fail(key == "rope_theta" ? key : f + "." + key, *e, shown(*v));
  };
  in_range("rope_theta", r.theta);
  in_range("factor", r.factor);
  in_range("attention_factor", r.attention_factor);
  in_range("beta_fast", r.beta_fast);
  in_range("beta_slow", r.beta_slow);
  in_range("mscale", r.mscale);
  in_range("mscale_all_dim", r.mscale_all_dim);
  in_range("low_freq_factor", r.low_freq_factor);
  in_range("high_freq_factor", r.high_freq_factor);
  if (r.type != "default" && !r.factor) fail(f + ".factor", "a number (rope_type \"" + r.type + "\")", "nothing");
  if (r.type == "dynamic" && max_positions <= 0)
    fail("max_position_embeddings", "a positive integer (rope_type \"dynamic\" scales beyond it)", "nothing");
  if (r.type == "yarn" && !r.original_max_position_embeddings && max_positions <= 0)
    fail(f + ".original_max_position_embeddings", "an integer (or max_position_embeddings, its default)", "nothing");
  if (r.type == "llama3") {  // transformers requires every one of them (a missing key is a KeyError there)
    if (!r.low_freq_factor) fail(f + ".low_freq_factor", "a number (rope_type \"llama3\")", "nothing");
    if (!r.high_freq_factor) fail(f + ".high_freq_factor", "a number (rope_type \"llama3\")", "nothing");
    if (!r.original_max_position_embeddings)
      fail(f + ".original_max_position_embeddings", "an integer (rope_type \"llama3\")", "nothing");
    if (!(*r.high_freq_factor > *r.low_freq_factor))
      fail(f + ".high_freq_factor", "a number above low_freq_factor (" + shown(*r.low_freq_factor) + ")",
           shown(*r.high_freq_factor));
  }
}

RopeConfig parse_rope_config(const json& j, double default_theta, int64_t max_positions, bool strict) {
  std::optional<double> top_theta;
  if (j.contains("rope_theta") && !j["rope_theta"].is_null()) top_theta = number(j, "", "rope_theta");
  const double theta = top_theta.value_or(default_theta);
  auto present = [&](const char* key) { return j.contains(key) && !j[key].is_null(); };
  // transformers 5 takes rope_scaling when it is a non-empty object (`rope_scaling or rope_parameters`).
  const bool scaling = present("rope_scaling") && !(j["rope_scaling"].is_object() && j["rope_scaling"].empty());
  RopeConfig r(theta);
  std::string field = "rope_parameters";
  if (present("rope_parameters")) {
    r = parse_one(j["rope_parameters"], "rope_parameters", theta, strict);
    if (top_theta && *top_theta != r.theta)
      fail("rope_theta", "the value of rope_parameters.rope_theta (" + shown(r.theta) + ")", shown(*top_theta));
    if (scaling) {
      const RopeConfig s = parse_one(j["rope_scaling"], "rope_scaling", r.theta, strict);
      if (!(s == r))
        fail("rope_scaling", "the scaling of rope_parameters (both are given; transformers 5 reads rope_scaling, "
             "older readers one or the other)", io::json_shown(j["rope_scaling"]));
    }
  } else if (scaling) {
    field = "rope_scaling";
    r = parse_one(j["rope_scaling"], field, theta, strict);
  }
  check_rope_config(r, max_positions, field);
  return r;
}

json rope_parameters_json(const RopeConfig& r) {
  json p = {{"rope_theta", r.theta}, {"rope_type", r.type}};
  auto put = [&](const char* key, const auto& v) {
    if (v) p[key] = *v;
  };
  put("factor", r.factor);
  put("original_max_position_embeddings", r.original_max_position_embeddings);
  put("attention_factor", r.attention_factor);
  put("beta_fast", r.beta_fast);
  put("beta_slow", r.beta_slow);
  put("mscale", r.mscale);
  put("mscale_all_dim", r.mscale_all_dim);
  put("truncate", r.truncate);
  put("low_freq_factor", r.low_freq_factor);
  put("high_freq_factor", r.high_freq_factor);
  return p;
}

json rope_scaling_json(const RopeConfig& r) {
  if (r.type == "default") return nullptr;
  json s = rope_parameters_json(r);
  s.erase("rope_theta");
  return s;
}

}  // namespace dflash::models
