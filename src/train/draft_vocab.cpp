#include "draft_vocab.h"

#include <algorithm>
#include <filesystem>
#include <numeric>
#include <stdexcept>

#include <ATen/ATen.h>

#include "safetensors.h"

namespace dflash::train {

std::vector<int64_t> count_answer_tokens(const data::SampleSource& samples, int64_t vocab, int64_t max_len) {
  std::vector<int64_t> counts(size_t(vocab), 0);
  for (int64_t i = 0; i < samples.size(); ++i) {
    const data::Sample s = samples.get(i);
    const int64_t n = std::min<int64_t>(s.input_ids.numel(), max_len);
    const at::Tensor ids = s.input_ids.reshape({-1}).narrow(0, 0, n).to(at::kLong).contiguous();
    const at::Tensor mask = s.loss_mask.reshape({-1}).narrow(0, 0, n).to(at::kBool).contiguous();
    const int64_t* p = ids.data_ptr<int64_t>();
    const bool* m = mask.data_ptr<bool>();
    for (int64_t j = 0; j < n; ++j) {
      if (!m[j]) continue;
      if (p[j] < 0 || p[j] >= vocab)
        throw std::invalid_argument("data: sample " + std::to_string(i) + " has token id " + std::to_string(p[j]) +
                                    " at position " + std::to_string(j) + ", outside the target vocabulary [0, " +
                                    std::to_string(vocab) + ")");
      ++counts[size_t(p[j])];
    }
  }
  return counts;
}

at::Tensor select_draft_vocab(const std::vector<int64_t>& counts, int64_t k, const std::vector<int64_t>& keep) {
  const int64_t vocab = int64_t(counts.size());
  std::vector<char> chosen(size_t(vocab), 0);
  int64_t n = 0;
  for (int64_t id : keep) {
    if (id < 0 || id >= vocab)
      throw std::invalid_argument("draft_vocab: special token id " + std::to_string(id) + " is outside the target "
                                  "vocabulary [0, " + std::to_string(vocab) + ")");
    if (!chosen[size_t(id)]) chosen[size_t(id)] = 1, ++n;
  }
  if (k < n || k > vocab)
    throw std::invalid_argument("train config: 'draft_vocab' must be in [" + std::to_string(n) + ", " +
                                std::to_string(vocab) + "] (the special tokens that must stay .. the target's vocabulary "
                                "size), got " + std::to_string(k));
  // Every id by (count descending, id ascending): a total order, so the choice never depends on sort stability.
  std::vector<int64_t> order(static_cast<size_t>(vocab));
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return counts[size_t(a)] != counts[size_t(b)] ? counts[size_t(a)] > counts[size_t(b)] : a < b;
  });
  // Unseen ids sort last by ascending id, which is also the fill rule for data with fewer than K tokens.
  for (size_t i = 0; i < order.size() && n < k; ++i)
    if (!chosen[size_t(order[i])]) chosen[size_t(order[i])] = 1, ++n;
  std::vector<int64_t> ids;
  ids.reserve(size_t(k));
  for (int64_t t = 0; t < vocab; ++t)
    if (chosen[size_t(t)]) ids.push_back(t);
  return at::tensor(ids, at::kLong);
}

std::string draft_vocab_path(const std::string& run_dir) {
  return (std::filesystem::path(run_dir) / "draft_vocab.safetensors").string();
}

void save_draft_vocab(const std::string& run_dir, const DraftVocabFile& f) {
  io::save_safetensors(draft_vocab_path(run_dir),
                       {{"draft_ids", f.draft_ids.contiguous()}, {"counts", f.counts.contiguous()},
                        {"lm_head", f.lm_head.contiguous()}},
                       {{"format", "dflash-draft-vocab-v1"}});
}

DraftVocabFile load_draft_vocab(const std::string& run_dir) {
  const std::string path = draft_vocab_path(run_dir);
  const auto f = io::SafetensorsFile::open(path);
  DraftVocabFile v;
  for (const char* name : {"draft_ids", "counts", "lm_head"})
    if (!f.contains(name)) throw std::invalid_argument(path + ": tensor '" + name + "' is missing");
  v.draft_ids = f.load("draft_ids");
  v.counts = f.load("counts");
  v.lm_head = f.load("lm_head");
  if (v.draft_ids.dim() != 1 || v.draft_ids.scalar_type() != at::kLong || v.lm_head.dim() != 2 ||
      v.lm_head.size(0) != v.draft_ids.size(0))
    throw std::invalid_argument(path + ": expected draft_ids int64 [K] and lm_head [K, H]");
  return v;
}

}  // namespace dflash::train
