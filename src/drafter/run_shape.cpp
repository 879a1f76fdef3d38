#include "run_shape.h"

#include <stdexcept>

#include <nlohmann/json.hpp>

namespace dflash::drafter {

const std::vector<RunShapeField>& run_shape_fields() {
  static const std::vector<RunShapeField> f = {
      {"max_len", "int", "S", "tokens per sequence (longer ones are truncated): the step's context length",
       util::closed(2, 1048576), ""},
      {"num_anchors", "int", "N", "anchors (blocks) per sequence", util::closed(1, 1048576),
       " (at most max_len: one anchor per position)"},
      {"block_size", "int", "B", "block size B (a drafter config's own when one is given)", util::closed(2, 1024), ""},
      {"loss_chunk_rows", "int", "ROWS", "rows of logits per loss chunk", util::closed(1, 16777216), ""},
      {"kl_weight", "float", "X", "soft-label weight (0: hard labels only; dspark: 0, its L1 teacher replaces it)",
       util::closed(0, 1), " (0: hard labels only)"},
      {"dtype", "str", "DTYPE", "drafter compute dtype: bf16 | fp32 | fp64", {}, ""},
      {"activation_checkpoint", "str", "POLICY", "none | layer | every:K", {}, ""},
  };
  return f;
}

const RunShapeField& run_shape_field(const std::string& key) {
  for (const RunShapeField& f : run_shape_fields())
    if (f.key == key) return f;
  throw std::logic_error("run shape: no setting '" + key + "'");
}

std::string run_shape_text(const RunShape& s, const std::string& key) {
  if (key == "max_len") return std::to_string(s.max_len);
  if (key == "num_anchors") return std::to_string(s.num_anchors);
  if (key == "block_size") return std::to_string(s.block_size);
  if (key == "loss_chunk_rows") return std::to_string(s.loss_chunk_rows);
  if (key == "kl_weight") return nlohmann::json(s.kl_weight).dump();  // as train's config writes it: 0.0, 0.15
  if (key == "dtype") return util::dtype_name(s.dtype);
  if (key == "activation_checkpoint") return s.activation_checkpoint.name();
  throw std::logic_error("run shape: no setting '" + key + "'");
}

std::string run_shape_flag(const std::string& key) {
  std::string s = key;
  for (char& ch : s)
    if (ch == '_') ch = '-';
  return s;
}

namespace {

// The spellings `plan`, `bench step` and `bench flops` used before they took train's.
const std::vector<std::pair<std::string, std::string>>& old_spellings() {
  static const std::vector<std::pair<std::string, std::string>> o = {
      {"seq-len", "max_len"}, {"anchors", "num_anchors"}, {"loss-chunk", "loss_chunk_rows"},
      {"checkpoint", "activation_checkpoint"}};
  return o;
}

}  // namespace

void declare_run_shape(util::Args& a, const std::vector<std::string>& keys) {
  const RunShape defaults;
  for (const std::string& key : keys) {
    const RunShapeField& f = run_shape_field(key);
    const std::string flag = run_shape_flag(key);
    a.option(flag, f.value_name, run_shape_text(defaults, key), f.help);
    if (f.kind == "int") a.range(flag, int64_t(f.range.lo), int64_t(f.range.hi), f.note);
    if (f.kind == "float") a.range(flag, f.range, f.note);
    for (const auto& [old, new_key] : old_spellings())
      if (new_key == key && !a.declared(old)) a.renamed(old, flag);
  }
}

RunShape given_run_shape(const util::Args& a, const std::vector<std::string>& keys, RunShape s) {
  for (const std::string& key : keys) {
    const std::string flag = run_shape_flag(key);
    if (!a.given(flag)) continue;
    if (key == "max_len") s.max_len = a.i64(flag);
    else if (key == "num_anchors") s.num_anchors = a.i64(flag);
    else if (key == "block_size") s.block_size = a.i64(flag);
    else if (key == "loss_chunk_rows") s.loss_chunk_rows = a.i64(flag);
    else if (key == "kl_weight") s.kl_weight = a.f64(flag);
    else if (key == "dtype") {
      const auto d = util::dtype_from_name(a.str(flag));
      if (!d || *d == util::Dtype::F16)  // train's rule: the drafter does not compute in fp16
        throw util::UsageError(a.command() + ": --dtype must be bf16, fp32 or fp64, got '" + a.str(flag) + "'");
      s.dtype = *d;
    } else if (key == "activation_checkpoint") {
      const auto p = CheckpointPolicy::from_text(a.str(flag));
      if (!p)
        throw util::UsageError(a.command() + ": --activation-checkpoint must be " + kCheckpointPolicySpellings +
                               ", got '" + a.str(flag) + "'");
      s.activation_checkpoint = *p;
    } else {
      throw std::logic_error("run shape: no setting '" + key + "'");
    }
  }
  return s;
}

}  // namespace dflash::drafter
