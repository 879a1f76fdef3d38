// The RoPE, norm, loss and attention settings of a config, the numbers a model is computed from: a target
// config.json, a drafter config.json or a train config (byte 0 picks which; the rest is the file). Invariant: a
// clean error naming the input, or settings that give a finite, valid model:
//   - RoPE: every frequency of the table (as rope.cpp computes it, here in double as a reference, then rounded to
//     the float32 the table is kept in) finite and positive, every angle up to the context length finite, the
//     yarn attention scaling finite and positive (a factor of 1e-39 or a subnormal rope_theta used to give NaN
//     tables with exit 0);
//   - rms_norm_eps finite and positive; the drafter's attention windows non-negative;
//   - train config: the loss weight of every block slot finite in [0, 1] and the first slot's 1, kl_weight in [0, 1], the optimizer's
//     numbers finite (lr > 0, betas in [0, 1), eps > 0);
//   - the families (issue 49): a drafter config names one family, a DSpark or DFlash2 one has no draft vocabulary,
//     its heads / convs / selector within their documented ranges; a train config's family loss weights finite in
//     [0, 1000], so that weight x a loss term of float32's scale stays finite.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "dflash2_drafter_settings.h"
#include "drafter_config.h"
#include "dspark_drafter_settings.h"
#include "family_registry.h"
#include "fuzz_common.h"
#include "loss_weighting.h"
#include "rope_config.h"
#include "strict_json.h"
#include "target_config.h"
#include "train_config.h"

namespace {

using dflash::fuzz::violated;
using dflash::models::RopeConfig;

bool finite_positive_float(double v) {
  const float f = static_cast<float>(v);
  return std::isfinite(f) && f > 0;
}

// transformers' yarn correction dimension (rope.cpp's correction_dim).
double correction_dim(double rotations, int64_t dim, double base, double length) {
  return (double(dim) * std::log(length / (rotations * 2 * M_PI))) / (2 * std::log(base));
}
double yarn_mscale(double scale, double m) { return scale <= 1 ? 1.0 : 0.1 * m * std::log(scale) + 1.0; }

// Frequency i of `dim` rotated dims at sequence length `seq` (dynamic scales past max_positions).
double inv_freq(const RopeConfig& r, int64_t i, int64_t dim, int64_t max_positions, int64_t seq) {
  const double exponent = double(2 * i) / double(dim);
  double base = r.theta;
  if (r.type == "dynamic" && seq > max_positions) {
    const double f = *r.factor;
    base = r.theta * std::pow(f * double(seq) / double(max_positions) - (f - 1), double(dim) / double(dim - 2));
  }
  double inv = 1.0 / std::pow(base, exponent);
  if (r.type == "linear") inv /= *r.factor;
  if (r.type == "yarn") {
    const double fast = r.beta_fast.value_or(0) != 0 ? *r.beta_fast : 32.0;
    const double slow = r.beta_slow.value_or(0) != 0 ? *r.beta_slow : 1.0;
    const double original = double(r.original_max_position_embeddings.value_or(max_positions));
    double low = correction_dim(fast, dim, r.theta, original), high = correction_dim(slow, dim, r.theta, original);
    if (r.truncate.value_or(true)) low = std::floor(low), high = std::ceil(high);
    low = std::max(low, 0.0);
    high = std::min(high, double(dim - 1));
    if (low == high) high += 0.001;
    const double keep = 1 - std::clamp((double(i) - low) / (high - low), 0.0, 1.0);
    inv = inv / *r.factor * (1 - keep) + inv * keep;
  }
  if (r.type == "llama3") {
    const double old_len = double(*r.original_max_position_embeddings), lo = *r.low_freq_factor,
                 hi = *r.high_freq_factor, wavelen = 2 * M_PI / inv;
    if (wavelen > old_len / lo) inv /= *r.factor;
    else if (!(wavelen < old_len / hi)) {
      const double smooth = (old_len / wavelen - lo) / (hi - lo);
      inv = (1 - smooth) * inv / *r.factor + smooth * inv;
    }
  }
  return inv;
}

void check_rope(const RopeConfig& r, int64_t dim, int64_t max_positions, const std::string& what) {
  if (dim < 4 || dim % 2 != 0) return;  // rope.cpp refuses these (or has nothing to rotate)
  const int64_t context = std::max<int64_t>(max_positions, r.original_max_position_embeddings.value_or(0));
  const int64_t seq = std::min<int64_t>(std::max<int64_t>(2 * context, 4096), int64_t(1) << 31);
  const int64_t pairs = dim / 2, stride = std::max<int64_t>(1, pairs / 256);  // a sample of a huge head
  for (int64_t i = 0; i < pairs; i += (i + stride < pairs ? stride : std::max<int64_t>(1, pairs - 1 - i))) {
    const double f = inv_freq(r, i, dim, std::max<int64_t>(max_positions, 1), seq);
    if (!finite_positive_float(f) || !std::isfinite(static_cast<float>(f) * static_cast<float>(seq)))
      violated(what + ": rope type " + r.type + " theta " + std::to_string(r.theta) + " gives frequency " +
               std::to_string(f) + " at pair " + std::to_string(i) + " of " + std::to_string(pairs));
  }
  if (r.type == "yarn") {
    const double factor = *r.factor;
    double scaling = yarn_mscale(factor, 1.0);
    if (r.attention_factor) scaling = *r.attention_factor;
    else if (r.mscale.value_or(0) != 0 && r.mscale_all_dim.value_or(0) != 0)
      scaling = yarn_mscale(factor, *r.mscale) / yarn_mscale(factor, *r.mscale_all_dim);
    if (!finite_positive_float(scaling)) violated(what + ": yarn attention scaling " + std::to_string(scaling));
  }
}

void check_eps(double eps, const std::string& what) {
  if (!finite_positive_float(eps)) violated(what + ": rms_norm_eps " + std::to_string(eps));
}

// What a family does not implement never parses, and its shapes stay in the documented ranges.
void check_family(const dflash::drafter::DrafterConfig& d, const std::string& what) {
  // A family that refuses a draft vocabulary (Family::draft_vocab_refusal) never parses with one.
  if (*dflash::drafter::family_of(d.family).draft_vocab_refusal() && d.draft_vocab_size != 0)
    violated(what + ": a " + std::string(d.family.name()) + " drafter with a draft vocabulary");
  if (d.family == dflash::drafter::family_named("dspark", "test")) {
    const int64_t r = dflash::families::dspark_settings(d).markov_rank;
    if (r < 0 || r > 65536) violated(what + ": markov_rank " + std::to_string(r));
  }
  if (d.family != dflash::drafter::family_named("dflash2", "test")) return;
  const auto& f = dflash::families::dflash2_settings(d);
  if (f.conv_kernel_size < 1 || f.conv_kernel_size > 64 || f.conv_group_size < 1 || f.conv_group_size > 65536 ||
      d.hidden_size % f.conv_group_size != 0 || f.selector_rank < 1 || f.selector_rank > 65536 ||
      f.selector_top_k < 1 || f.selector_top_k > std::min<int64_t>(1024, d.vocab_size))
    violated(what + ": DFlash2 settings out of range");
}

void target_case(const std::string& text) {
  const char* name = "fuzz-target.json";
  dflash::models::TargetConfig t;
  bool ok = false;
  dflash::fuzz::expect_clean(name, [&] {
    t = dflash::models::parse_target_config(text, name);
    t.validate(name);
    ok = true;
  });
  if (!ok) return;
  check_eps(t.rms_norm_eps, name);
  check_rope(t.rope, t.info().hybrid ? t.rotary_dim() : t.head_dim, t.max_position_embeddings, name);
}

void drafter_case(const std::string& text) {
  const char* name = "fuzz-drafter.json";
  dflash::drafter::DrafterConfig d;
  bool ok = false;
  dflash::fuzz::expect_clean(name, [&] {
    nlohmann::json j;
    try {
      j = dflash::io::parse_json_strict(text);  // as load_drafter_config reads the file
    } catch (const dflash::io::JsonError&) {
      return;  // not JSON: load_drafter_config names the file around this error
    }
    d = dflash::drafter::parse_drafter_config(j, name);
    d.validate(name);
    ok = true;
  });
  if (!ok) return;
  check_eps(d.rms_norm_eps, name);
  check_rope(d.rope, d.head_dim, d.max_position_embeddings, name);
  for (int64_t i = 0; i < std::min<int64_t>(d.num_hidden_layers, 4096); ++i)
    if (d.window_for_layer(i) < 0) violated(std::string(name) + ": negative attention window");
  check_family(d, name);
}

void train_case(const std::string& text, bool yaml) {
  const std::string name = yaml ? "fuzz-settings.yaml" : "fuzz-settings.json";
  dflash::train::TrainConfig c;
  bool ok = false;
  dflash::fuzz::expect_clean(name.c_str(), [&] { dflash::train::apply_config_text(c, text, name); ok = true; });
  if (!ok) return;
  ok = false;
  dflash::fuzz::expect_clean("train config", [&] { c.validate(); ok = true; });
  if (!ok) return;
  const double gamma = dflash::drafter::loss_gamma(c.gamma, c.loss_decay, c.block_size);
  for (int64_t k = 1; k < c.block_size; ++k) {
    const double w = std::exp(-double(k - 1) / gamma);
    // Far slots may underflow to 0 with a small gamma (they then do not train); slot 1 always weighs 1, so the
    // weights' sum, which divides the loss, is positive.
    if (!std::isfinite(w) || !(w >= 0) || w > 1 || (k == 1 && w != 1))
      violated("train config: loss weight " + std::to_string(w) + " of slot " + std::to_string(k));
  }
  if (!(c.kl_weight >= 0 && c.kl_weight <= 1)) violated("train config: kl_weight " + std::to_string(c.kl_weight));
  if (!std::isfinite(c.lr) || !(c.lr > 0) || !(c.beta1 >= 0 && c.beta1 < 1) || !(c.beta2 >= 0 && c.beta2 < 1) ||
      !finite_positive_float(c.eps) || !std::isfinite(c.clip) || !finite_positive_float(c.init_std) ||
      !finite_positive_float(c.init_final_norm))
    violated("train config: an optimizer or init number out of its range");
  // The family loss weights scale loss terms of float32's scale (a CE of at most ~100): the products stay finite.
  auto weight = [&](const char* key) { return c.family_setting(key).get<double>(); };
  const double ce = weight("ce_loss_weight"), l1 = weight("l1_loss_weight"), conf = weight("confidence_loss_weight");
  for (const double w : {ce, l1, conf, weight("selector_loss_weight")})
    if (!(w >= 0 && w <= 1000) || !std::isfinite(static_cast<float>(w * 100.0)))
      violated("train config: a family loss weight " + std::to_string(w));
  if (c.family() == dflash::drafter::family_named("dspark", "test") && !(ce + l1 + conf > 0))
    violated("train config: dspark with every loss weight 0");
  if (*dflash::drafter::family_of(c.family()).draft_vocab_refusal() && c.draft_vocab != 0)
    violated("train config: a draft vocabulary with drafter_family " + std::string(c.family().name()));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 4) {
    case 0: target_case(text); break;
    case 1: drafter_case(text); break;
    case 2: train_case(text, false); break;
    default: train_case(text, true); break;
  }
  return 0;
}
