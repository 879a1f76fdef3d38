#include "selfcheck_json.h"

namespace dflash::train {

nlohmann::json tensor_checks_json(const std::vector<ops::TensorCheck>& tensors) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& t : tensors)
    out.push_back({{"name", t.name}, {"error", t.error}, {"tolerance", t.tolerance}, {"low_error", t.low_error},
                   {"magnitude", t.magnitude}});
  return out;
}

nlohmann::json attention_check_json(const ops::AttentionCheckResult& r) {
  const ops::AttentionCheckSpec& s = r.spec;
  const nlohmann::json spec = {{"device", s.device.str()}, {"dtype", ops::short_dtype_name(s.dtype)},
                               {"context_len", s.context_len}, {"q_heads", s.q_heads}, {"kv_heads", s.kv_heads},
                               {"head_dim", s.head_dim}, {"block_size", s.block_size}, {"num_blocks", s.num_blocks},
                               {"window", s.window}, {"packed", s.packed}, {"backward", s.backward}};
  nlohmann::json j = {{"shape", s.describe()}, {"spec", spec}, {"passed", r.passed},
                      {"tensors", tensor_checks_json(r.tensors)}, {"fused_ms", r.fused_ms},
                      {"reference_ms", r.reference_ms}};
  if (!r.exception.empty()) j["exception"] = r.exception;
  if (!r.reference_exception.empty()) j["reference_exception"] = r.reference_exception;
  return j;
}

nlohmann::json loss_check_json(const ops::LossCheckResult& r) {
  nlohmann::json j = {{"shape", r.spec.describe()}, {"passed", r.passed}, {"tensors", tensor_checks_json(r.tensors)}};
  if (!r.exception.empty()) j["exception"] = r.exception;
  return j;
}

}  // namespace dflash::train
