#include "train_log.h"

#include <unistd.h>

#include <algorithm>
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

BusyReport busy_report(double samples, double seconds, double producer_busy_seconds, double drafter_busy_seconds) {
  BusyReport b;
  if (seconds <= 0) return b;
  auto fraction = [&](double busy) { return std::clamp(busy / seconds, 0.0, 1.0); };
  b.samples_per_s = samples / seconds;
  b.producer_busy = fraction(producer_busy_seconds);
  b.drafter_busy = fraction(drafter_busy_seconds);
  b.producer_max_samples_per_s = b.producer_busy > 0 ? b.samples_per_s / b.producer_busy : 0;
  b.drafter_max_samples_per_s = b.drafter_busy > 0 ? b.samples_per_s / b.drafter_busy : 0;
  return b;
}

std::string busy_line(const BusyReport& b, const std::string& producer) {
  char line[128];
  std::snprintf(line, sizeof line, "%s %.0f%% busy, drafters %.0f%% busy: %s-bound", producer.c_str(),
                100 * b.producer_busy, 100 * b.drafter_busy,
                b.producer_busy >= b.drafter_busy ? producer.c_str() : "drafter");
  return line;
}

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
  window_samples_ += m.samples;
  window_producer_busy_ += m.producer_busy_seconds;
  window_drafter_busy_ += m.drafter_busy_seconds;
  const BusyReport busy = busy_report(window_samples_, window_seconds_, window_producer_busy_, window_drafter_busy_);
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
    for (const auto& [k, v] : m.family) j[k] = v;  // NaN (nothing counted) is written as null
    j["samples_per_s"] = busy.samples_per_s;
    j["producer_busy"] = busy.producer_busy;
    j["drafter_busy"] = busy.drafter_busy;
    j["producer_max_samples_per_s"] = busy.producer_max_samples_per_s;
    j["drafter_max_samples_per_s"] = busy.drafter_max_samples_per_s;
    std::ofstream(path_, std::ios::app) << j.dump() << "\n";
  }
  char line[640];
  int used = std::snprintf(line, sizeof line, "step %lld/%lld  loss %.4f  acc %.3f  lr %.2e  %.0f tok/s  ETA %s  RSS %.0f MB",
                           (long long)m.step, (long long)total_, m.loss, m.acc, m.lr, tps, duration(eta).c_str(),
                           double(rss) / 1e6);
  if (m.out_of_vocab >= 0 && used > 0 && size_t(used) < sizeof line)  // targets the draft vocabulary lacks
    used += std::snprintf(line + used, sizeof line - size_t(used), "  oov %.2f%%", 100.0 * m.out_of_vocab);
  if (!m.family_progress.empty() && used > 0 && size_t(used) < sizeof line)
    used += std::snprintf(line + used, sizeof line - size_t(used), "%s", m.family_progress.c_str());
  if (used > 0 && size_t(used) < sizeof line)
    std::snprintf(line + used, sizeof line - size_t(used), "  %s", busy_line(busy, producer_name_).c_str());
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
  if (log_step) window_tokens_ = window_seconds_ = window_samples_ = window_producer_busy_ = window_drafter_busy_ = 0;
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
