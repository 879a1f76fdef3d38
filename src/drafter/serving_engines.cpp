#include "serving_engines.h"

#include "family_registry.h"

namespace dflash::drafter {

namespace {

// The row of `engine` among the family's rows; nullptr: the engine does not serve the family (or no family of that
// name is registered).
const EngineRule* row_of(const std::string& family, const std::string& engine, std::vector<EngineRule>& rows) {
  const Family* f = find_family(family);
  rows = f ? f->engine_rules() : std::vector<EngineRule>{};
  const EngineRule* row = nullptr;
  for (const auto& r : rows)
    if (engine == r.engine) row = &r;
  return row;
}

}  // namespace

std::vector<std::string> engines_for_family(const std::string& family) {
  std::vector<std::string> out;
  std::vector<EngineRule> rows;
  for (const auto& e : engine_names())
    if (row_of(family, e, rows)) out.push_back(e);
  return out;
}

std::string engine_refusal(const ExportTraits& t, const std::string& engine) {
  std::vector<EngineRule> rows;
  const EngineRule* row = row_of(t.family, engine, rows);
  if (!row) return "does not serve the " + t.family + " family";
  std::string why;
  auto add = [&](bool applies, const char* what, const std::string& label) {
    if (applies && what) (why += why.empty() ? "" : "; ") += label + ": " + what;
  };
  add(t.draft_vocab, row->draft_vocab, "draft vocabulary");
  add(t.last_target_layer, row->last_layer, "the target's last layer as a feature");
  // A family's own columns are nullptr in every other family's rows, and its traits at their defaults elsewhere.
  add(t.markov_head_type != "vanilla", row->markov_variant, "a " + t.markov_head_type + " Markov head");
  add(t.markov_rank == 0, row->rank_zero, "markov_rank 0");
  add(!t.confidence_head, row->no_confidence, "no confidence head");
  add(t.confidence_head && !t.confidence_with_markov, row->confidence_without_markov,
      "confidence_head_with_markov false");
  add(t.sliding_layers, row->sliding, "sliding layers");
  add(t.selector_top_k > 0 && t.hidden_size < t.selector_top_k * (t.selector_top_k + 1), row->small_selector_lattice,
      "selector_top_k " + std::to_string(t.selector_top_k) + " at hidden_size " + std::to_string(t.hidden_size));
  return why;
}

std::vector<std::string> engines_serving(const ExportTraits& t) {
  std::vector<std::string> out;
  for (const auto& e : engine_names())
    if (engine_refusal(t, e).empty()) out.push_back(e);
  return out;
}

}  // namespace dflash::drafter
