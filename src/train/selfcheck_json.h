// The self-checks' results (ops/attention_selfcheck.h, ops/loss_selfcheck.h) as JSON, one schema for
// metrics.jsonl's attention_backend and loss_kernel events and for `dflash doctor --json`.
#pragma once
#include <vector>

#include <nlohmann/json.hpp>

#include "attention_selfcheck.h"
#include "loss_selfcheck.h"

namespace dflash::train {

// [{"name", "error", "tolerance", "low_error", "magnitude"}, ...]
nlohmann::json tensor_checks_json(const std::vector<ops::TensorCheck>& tensors);
// {"shape", "spec": {device, dtype, context_len, q_heads, kv_heads, head_dim, block_size, num_blocks, window,
// packed, backward}, "passed", "tensors", "fused_ms", "reference_ms"[, "exception"][, "reference_exception"]}
nlohmann::json attention_check_json(const ops::AttentionCheckResult& r);
// {"shape", "passed", "tensors"[, "exception"]}
nlohmann::json loss_check_json(const ops::LossCheckResult& r);

}  // namespace dflash::train
