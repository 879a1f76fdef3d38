#include "train_log.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "memory_probe.h"

namespace dflash::train {
namespace {

std::string duration(double s) {
  char buf[32];
  const int64_t t = int64_t(s + 0.5);
  if (t >= 3600) std::snprintf(buf, sizeof buf, "%lldh%02lldm", (long long)(t / 3600), (long long)(t % 3600 / 60));
  else if (t >= 60) std::snprintf(buf, sizeof buf, "%lldm%02llds", (long long)(t / 60), (long long)(t % 60));
  else std::snprintf(buf, sizeof buf, "%llds", (long long)t);
  return buf;
}

}  // namespace

TrainLog::TrainLog(const std::string& run_dir, bool enabled, int64_t start_step, int64_t total_steps, int64_t log_every)
    : path_((std::filesystem::path(run_dir) / "metrics.jsonl").string()), enabled_(enabled),
      tty_(::isatty(STDERR_FILENO) == 1), start_step_(start_step), total_(total_steps), every_(log_every),
      start_(std::chrono::steady_clock::now()) {
  if (!enabled_) return;
  std::vector<std::string> keep;
  if (start_step > 0) {
    std::ifstream in(path_);
    std::string line;
    while (std::getline(in, line)) {
      try {
        if (nlohmann::json::parse(line).at("step").get<int64_t>() <= start_step) keep.push_back(line);
      } catch (const std::exception&) {
        // a torn last line from a crash: dropped
      }
    }
  }
  std::ofstream out(path_, std::ios::trunc);
  for (const auto& l : keep) out << l << "\n";
}

void TrainLog::clear_bar() {
  if (bar_shown_) std::fprintf(stderr, "\r\033[K");
  bar_shown_ = false;
}

void TrainLog::step(const StepMetrics& m) {
  if (!enabled_) return;
  window_tokens_ += m.tokens;
  window_seconds_ += m.step_seconds;
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const int64_t done_here = m.step - start_step_;
  const double eta = done_here > 0 ? elapsed / double(done_here) * double(total_ - m.step) : 0;
  const int64_t rss = util::current_rss_bytes();
  const bool log_step = m.step % every_ == 0 || m.step == total_;
  const double tps = window_seconds_ > 0 ? window_tokens_ / window_seconds_ : 0;
  if (log_step) {
    nlohmann::json j = {{"step", m.step}, {"loss", m.loss}, {"acc", m.acc}, {"slot_acc", m.slot_acc},
                        {"lr", m.lr}, {"grad_norm", m.grad_norm}, {"tokens_per_s", tps},
                        {"rss_bytes", rss}, {"elapsed_s", elapsed}};
    if (m.out_of_vocab >= 0) j["out_of_vocab"] = m.out_of_vocab;
    std::ofstream(path_, std::ios::app) << j.dump() << "\n";
  }
  char line[320];
  int used = std::snprintf(line, sizeof line, "step %lld/%lld  loss %.4f  acc %.3f  lr %.2e  %.0f tok/s  ETA %s  RSS %.0f MB",
                           (long long)m.step, (long long)total_, m.loss, m.acc, m.lr, tps, duration(eta).c_str(),
                           double(rss) / 1e6);
  if (m.out_of_vocab >= 0 && used > 0 && size_t(used) < sizeof line)  // targets the draft vocabulary lacks
    std::snprintf(line + used, sizeof line - size_t(used), "  oov %.2f%%", 100.0 * m.out_of_vocab);
  if (tty_) {
    const int width = 24;
    const int fill = total_ > 0 ? int(width * m.step / total_) : width;
    std::fprintf(stderr, "\r\033[K[%s%s] %s", std::string(size_t(fill), '#').c_str(),
                 std::string(size_t(width - fill), '.').c_str(), line);
    std::fflush(stderr);
    bar_shown_ = true;
  } else if (log_step) {
    std::fprintf(stderr, "%s\n", line);
  }
  if (log_step) window_tokens_ = window_seconds_ = 0;
}

void TrainLog::message(const std::string& text) {
  if (!enabled_) return;
  clear_bar();
  std::fprintf(stderr, "%s\n", text.c_str());
}

void TrainLog::event(const nlohmann::json& j) {
  if (enabled_) std::ofstream(path_, std::ios::app) << j.dump() << "\n";
}

void TrainLog::finish(const std::string& text) { message(text); }

}  // namespace dflash::train
