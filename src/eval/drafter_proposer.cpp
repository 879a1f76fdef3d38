#include "drafter_proposer.h"

#include <ATen/ATen.h>

#include "draft_vocab_map.h"
#include "family_model.h"
#include "family_registry.h"
#include "safetensors.h"
#include "token_sampler.h"

#include <algorithm>
#include <filesystem>
#include <random>
#include <stdexcept>

namespace dflash::eval {

std::string resolve_drafter_dir(const std::string& path) {
  namespace fs = std::filesystem;
  auto is_export = [](const fs::path& p) {
    return fs::is_regular_file(p / "config.json") && fs::is_regular_file(p / "model.safetensors");
  };
  if (is_export(path)) return path;
  // A training run directory: its exported drafter (docs/TRAINING.md).
  for (const char* sub : {"export", "drafter", "final"})
    if (is_export(fs::path(path) / sub)) return (fs::path(path) / sub).string();
  throw std::runtime_error("drafter '" + path +
                           "': expected a folder with config.json + model.safetensors, or a run directory with "
                           "export/config.json + export/model.safetensors");
}

LoadedDrafter load_drafter(const std::string& path, const at::Device& device) {
  LoadedDrafter d;
  d.dir = resolve_drafter_dir(path);
  d.config = drafter::load_drafter_config(d.dir + "/config.json");
  const std::string file = d.dir + "/model.safetensors";
  const auto st = io::SafetensorsFile::open(file);
  std::vector<std::string> names;
  for (const auto& n : st.names())
    if (d.config.draft_vocab_size == 0 || (n != "lm_head.weight" && n != "d2t" && n != "t2d")) names.push_back(n);
  d.weights = drafter::drafter_weights_from(d.config, names, [&](const std::string& n) { return st.load(n); }, at::kFloat,
                                            file);
  if (d.config.draft_vocab_size > 0) {
    const int64_t k = d.config.draft_vocab_size;
    for (const char* n : {"lm_head.weight", "d2t"})
      if (!st.contains(n))
        throw std::invalid_argument(file + ": tensor '" + std::string(n) + "' is missing (config.json has draft_vocab_size " +
                                    std::to_string(k) + ")");
    d.lm_head = st.load("lm_head.weight").to(at::kFloat);
    if (d.lm_head.sizes() != at::IntArrayRef({k, d.config.hidden_size}))
      throw std::invalid_argument(file + ": 'lm_head.weight' must be [" + std::to_string(k) + ", " +
                                  std::to_string(d.config.hidden_size) + "] (draft_vocab_size x hidden_size), got " +
                                  c10::str(d.lm_head.sizes()));
    const at::Tensor d2t = st.load("d2t");
    if (d2t.numel() != k)
      throw std::invalid_argument(file + ": 'd2t' must have draft_vocab_size = " + std::to_string(k) + " entries");
    d.draft_ids = drafter::draft_ids_from_offsets(d2t, st.contains("t2d") ? st.load("t2d") : at::Tensor(),
                                                d.config.vocab_size, file);
    d.lm_head = d.lm_head.to(device);
    d.draft_ids = d.draft_ids.to(device);
  }
  if (!device.is_cpu()) {
    for (auto* t : {&d.weights.fc, &d.weights.hidden_norm, &d.weights.norm}) *t = t->to(device);
    for (auto& l : d.weights.layers)
      for (auto& t : l.t) t = t.to(device);
  }
  return d;
}

DrafterProposer::DrafterProposer(const LoadedDrafter& d, const models::TargetModel& target,
                                 const DrafterProposerOptions& o)
    : d_(d), target_(target), cache_(d_.config, d_.weights, o.attention), max_draft_(o.max_draft) {
  const auto& tc = target.config();
  const auto& c = d.config;
  auto fail = [&](const std::string& what) {
    throw std::runtime_error("drafter " + d.dir + "/config.json does not fit the target: " + what);
  };
  if (c.hidden_size != tc.hidden_size)
    fail("hidden_size " + std::to_string(c.hidden_size) + " vs target " + std::to_string(tc.hidden_size));
  if (c.num_target_layers != tc.num_hidden_layers)
    fail("num_target_layers " + std::to_string(c.num_target_layers) + " vs target " +
         std::to_string(tc.num_hidden_layers));
  if (c.vocab_size != tc.vocab_size)
    fail("vocab_size " + std::to_string(c.vocab_size) + " vs target " + std::to_string(tc.vocab_size));
  if (c.mask_token_id < 0 || c.mask_token_id >= tc.vocab_size)
    fail("mask_token_id " + std::to_string(c.mask_token_id) + " outside the target vocabulary");
  for (auto id : c.target_layer_ids)
    if (id < 0 || id >= tc.num_hidden_layers) fail("target_layer_ids has " + std::to_string(id));
  drafts_per_cycle_ = drafter::family_of(c.family).drafts_per_cycle(c);
  if (const drafter::FamilyDrafting* f = drafter::model_of(c).drafting())
    family_ = f->make(c, d.weights, {o.confidence_threshold}, d.dir + "/config.json");
}

std::vector<int> DrafterProposer::target_layers() const {
  std::vector<int> out;
  for (auto id : d_.config.target_layer_ids) out.push_back(static_cast<int>(id));
  return out;
}

at::Tensor DrafterProposer::features(const models::TargetOutput& out, int64_t n) const {
  std::vector<at::Tensor> parts;
  for (auto id : d_.config.target_layer_ids) parts.push_back(out.hidden.at(static_cast<int>(id)).narrow(1, 0, n).to(d_.weights.fc.device()));
  return at::cat(parts, -1);
}

void DrafterProposer::start(const std::vector<int64_t>& prompt, const models::TargetOutput& prefill) {
  cache_.reset();
  cache_.append(features(prefill, static_cast<int64_t>(prompt.size())));
}

at::Tensor DrafterProposer::cycle_hidden(int64_t last_token, int64_t pos) {
  if (pos != cache_.length())
    throw std::logic_error("DrafterProposer: anchor " + std::to_string(pos) + " but context holds " +
                           std::to_string(cache_.length()) + " positions");
  const int64_t B = d_.config.block_size;
  std::vector<int64_t> ids(static_cast<size_t>(B), d_.config.mask_token_id);
  ids[0] = last_token;
  const at::Tensor emb = target_.embed(at::tensor(ids, at::kLong).view({1, B}).to(target_.input_device()));
  return cache_.block_hidden(emb.to(d_.weights.fc.device()))[0];
}

std::vector<int64_t> DrafterProposer::plain_drafts(const at::Tensor& hidden, int64_t n) const {
  const at::Tensor h = hidden.unsqueeze(0);  // [1, B, H]
  at::Tensor best;
  if (d_.lm_head.defined()) {  // draft vocabulary: argmax over its K rows, then draft id -> target id
    const at::Tensor logits = at::linear(h.narrow(1, 1, n).to(d_.lm_head.scalar_type()), d_.lm_head);
    best = d_.draft_ids.index_select(0, logits.argmax(-1).reshape({-1}));
  } else {
    best = target_.lm_head(h.narrow(1, 1, n).to(target_.dtype())).argmax(-1).reshape({-1});
  }
  best = best.to(at::kCPU).contiguous();
  std::vector<int64_t> out(best.data_ptr<int64_t>(), best.data_ptr<int64_t>() + best.numel());
  out.resize(static_cast<size_t>(drafts_per_cycle_), d_.config.mask_token_id);  // slots past max_draft: never verified
  return out;
}

Draft DrafterProposer::draft_with(int64_t last_token, int64_t pos, const drafter::DraftSampling& sampling) {
  const at::Tensor h = cycle_hidden(last_token, pos);
  const int64_t n = max_draft_ > 0 ? std::min(max_draft_, drafts_per_cycle_) : drafts_per_cycle_;
  if (!family_) return {plain_drafts(h, n), {}};  // point masses at any temperature, as DFlash always drafted
  drafter::BlockDraft b = family_->draft(
      {h, last_token, n, [this](const at::Tensor& x) { return target_.lm_head(x.to(target_.dtype())); }}, sampling);
  return {std::move(b.tokens), std::move(b.probs)};
}

std::vector<int64_t> DrafterProposer::propose(int64_t last_token, int64_t pos) {
  return draft_with(last_token, pos, {}).tokens;
}

Draft DrafterProposer::draft(int64_t last_token, int64_t pos, double temperature, std::mt19937_64& rng) {
  drafter::DraftSampling s;
  s.temperature = temperature;
  s.uniform = [&rng] { return std::uniform_real_distribution<double>(0.0, 1.0)(rng); };
  s.probs = [temperature](const at::Tensor& logits) { return data::token_probs(logits, temperature); };
  s.draw = [&rng](const std::vector<double>& p) { return data::draw(p, rng); };
  return draft_with(last_token, pos, s);
}

void DrafterProposer::commit(const models::TargetOutput& verify, int64_t n) { cache_.append(features(verify, n)); }

}  // namespace dflash::eval
