#include "progress.h"

#include <unistd.h>

#include <cstdio>

namespace dflash::data {

std::string format_duration(double s) {
  if (!(s >= 0) || s > 1e7) return "?";
  const long t = static_cast<long>(s + 0.5);
  char buf[32];
  if (t >= 3600) std::snprintf(buf, sizeof buf, "%ldh%02ldm", t / 3600, (t % 3600) / 60);
  else if (t >= 60) std::snprintf(buf, sizeof buf, "%ldm%02lds", t / 60, t % 60);
  else std::snprintf(buf, sizeof buf, "%lds", t);
  return buf;
}

Progress::Progress(std::string label, int64_t total, int64_t already_done, std::string unit)
    : label_(std::move(label)), unit_(std::move(unit)), total_(total), start_done_(already_done), done_(already_done),
      tty_(::isatty(2) != 0), start_(std::chrono::steady_clock::now()), last_draw_(start_) {}

double Progress::seconds() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

void Progress::update(int64_t done, int64_t tokens, bool force) {
  done_ = done;
  tokens_ = tokens;
  const auto now = std::chrono::steady_clock::now();
  const double since = std::chrono::duration<double>(now - last_draw_).count();
  if (!force && since < (tty_ ? 0.2 : 5.0)) return;
  last_draw_ = now;
  const double el = seconds();
  const int64_t run_done = done_ - start_done_;
  const double eta = run_done > 0 ? el / static_cast<double>(run_done) * static_cast<double>(total_ - done_) : -1;
  const int width = 24;
  const int fill = total_ > 0 ? static_cast<int>(width * done_ / total_) : 0;
  std::string bar(static_cast<size_t>(fill), '#');
  bar.resize(width, '.');
  std::string rate;
  if (!unit_.empty()) {
    char r[64];
    std::snprintf(r, sizeof r, "  %.2f %s/s", el > 0 ? static_cast<double>(run_done) / el : 0.0, unit_.c_str());
    rate = r;
  }
  std::fprintf(stderr, "%s%s [%s] %lld/%lld%s  %lld tok  %.1f tok/s  elapsed %s  ETA %s%s", tty_ ? "\r" : "",
               label_.c_str(), bar.c_str(), static_cast<long long>(done_), static_cast<long long>(total_), rate.c_str(),
               static_cast<long long>(tokens_), el > 0 ? tokens_ / el : 0.0, format_duration(el).c_str(),
               run_done > 0 ? format_duration(eta).c_str() : "?", tty_ ? "\x1b[K" : "\n");
  std::fflush(stderr);
}

void Progress::finish() {
  update(done_, tokens_, true);
  if (tty_) std::fprintf(stderr, "\n");
}

}  // namespace dflash::data
