#include "checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "atomic_output.h"
#include "safetensors.h"

namespace fs = std::filesystem;

namespace dflash::train {
using data::fsync_path;
namespace {

std::string ckpt_dir(const std::string& run_dir) { return (fs::path(run_dir) / "checkpoints").string(); }

int64_t step_of(const std::string& name) {  // "step-12.safetensors" -> 12, else -1
  if (name.rfind("step-", 0) != 0 || name.size() < 18 || name.substr(name.size() - 12) != ".safetensors") return -1;
  try {
    return std::stoll(name.substr(5, name.size() - 17));
  } catch (const std::exception&) {
    return -1;
  }
}

std::vector<std::pair<int64_t, std::string>> list_checkpoints(const std::string& run_dir) {
  std::vector<std::pair<int64_t, std::string>> out;
  if (!fs::is_directory(ckpt_dir(run_dir))) return out;
  for (const auto& e : fs::directory_iterator(ckpt_dir(run_dir))) {
    const int64_t s = step_of(e.path().filename().string());
    if (s >= 0) out.emplace_back(s, e.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

std::string save_checkpoint(const std::string& run_dir, const TrainState& s, int64_t keep,
                            const std::function<void()>& before_rename) {
  const std::string dir = ckpt_dir(run_dir);
  fs::create_directories(dir);
  io::remove_stale_temporaries(dir);  // left by a save that was killed (kill -9, power cut)
  NamedTensors t;
  for (const auto& [n, v] : s.master) t.emplace_back("model." + n, v);
  for (const auto& [n, v] : s.exp_avg) t.emplace_back("adam_m." + n, v);
  for (const auto& [n, v] : s.exp_avg_sq) t.emplace_back("adam_v." + n, v);
  nlohmann::json meta = {{"step", s.step}, {"data_pos", s.data_pos}, {"info", s.info}};
  const std::string name = "step-" + std::to_string(s.step) + ".safetensors";
  const std::string final_path = (fs::path(dir) / name).string();
  const std::string tmp = io::temp_path_for(final_path);  // "<name>.tmp.<pid>": stale ones are recognised later
  io::save_safetensors(tmp, t, {{"dflash_checkpoint", meta.dump()}});  // itself atomic: tmp is whole or absent
  fsync_path(tmp);
  if (before_rename) before_rename();
  if (std::rename(tmp.c_str(), final_path.c_str()) != 0) throw std::runtime_error(final_path + ": rename failed");
  fsync_dir(dir);
  write_file_atomic((fs::path(dir) / "latest").string(), name + "\n");
  // Only now is the new checkpoint the one loads pick: old ones beyond `keep` can go.
  auto all = list_checkpoints(run_dir);
  while (int64_t(all.size()) > keep) {
    if (all.front().second != final_path) fs::remove(all.front().second);
    all.erase(all.begin());
  }
  return final_path;
}

TrainState load_checkpoint(const std::string& path) {
  const auto f = io::SafetensorsFile::open(path);
  const auto it = f.metadata().find("dflash_checkpoint");
  if (it == f.metadata().end()) throw std::invalid_argument(path + ": not a dflash checkpoint (no dflash_checkpoint metadata)");
  TrainState s;
  const auto meta = nlohmann::json::parse(it->second);
  s.step = meta.at("step").get<int64_t>();
  s.data_pos = meta.at("data_pos").get<int64_t>();
  s.info = meta.at("info");
  for (const auto& name : f.names()) {
    const auto dot = name.find('.');
    const std::string kind = name.substr(0, dot), rest = name.substr(dot + 1);
    at::Tensor v = f.load(name);
    if (kind == "model") s.master.emplace_back(rest, v);
    else if (kind == "adam_m") s.exp_avg.emplace_back(rest, v);
    else if (kind == "adam_v") s.exp_avg_sq.emplace_back(rest, v);
    else throw std::invalid_argument(path + ": unexpected tensor '" + name + "'");
  }
  return s;
}

bool has_checkpoint(const std::string& run_dir) { return !list_checkpoints(run_dir).empty(); }

TrainState load_latest_checkpoint(const std::string& run_dir, std::string* path_out) {
  // A resume first clears what an interrupted save left behind (never a live writer's file: see atomic_output.h).
  if (const int n = io::remove_stale_temporaries(ckpt_dir(run_dir)); n > 0)
    std::fprintf(stderr, "note: removed %d temporary file(s) left in %s by an interrupted save\n", n,
                 ckpt_dir(run_dir).c_str());
  std::vector<std::string> candidates;
  const std::string latest = (fs::path(ckpt_dir(run_dir)) / "latest").string();
  if (std::ifstream in(latest); in) {
    std::string name;
    std::getline(in, name);
    if (!name.empty()) candidates.push_back((fs::path(ckpt_dir(run_dir)) / name).string());
  }
  auto all = list_checkpoints(run_dir);
  for (auto it = all.rbegin(); it != all.rend(); ++it) candidates.push_back(it->second);
  for (const auto& c : candidates) {
    try {
      TrainState s = load_checkpoint(c);
      if (path_out) *path_out = c;
      return s;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "warning: skipping checkpoint %s: %s\n", c.c_str(), e.what());
    }
  }
  throw std::invalid_argument(run_dir + ": no loadable checkpoint in " + ckpt_dir(run_dir));
}

}  // namespace dflash::train
