// The progress of a long CLI job on stderr: a line redrawn in place on a terminal, a plain line
// every few seconds in a log.
#include "cli/progress.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <utility>

#include "engine/common/error.h"

namespace kvscope::cli {

namespace {

constexpr double kDefaultInterval = 5.0;  // seconds between plain lines in a log
constexpr double kFirstLine = 2.0;        // no plain line for jobs shorter than this
constexpr double kRedraw = 0.1;           // seconds between terminal redraws

}  // namespace

double progress_interval_from_env() {
  const char* text = std::getenv("KVSCOPE_PROGRESS_INTERVAL");
  if (text == nullptr || *text == '\0') return kDefaultInterval;
  const std::string s(text);
  if (s == "off") return -1.0;
  char* end = nullptr;
  const double v = std::strtod(text, &end);
  if (end == text || *end != '\0' || !std::isfinite(v) || v < 0) {
    throw Error(
        "KVSCOPE_PROGRESS_INTERVAL",
        "expected seconds between progress lines (a number >= 0) or 'off', got '" + s + "'");
  }
  return v;
}

std::string format_duration(double seconds) {
  char buf[32];
  if (seconds < 60) {
    std::snprintf(buf, sizeof buf, "%.1f s", seconds);
  } else if (seconds < 3600) {
    const long s = std::lround(seconds);
    std::snprintf(buf, sizeof buf, "%ldm%02lds", s / 60, s % 60);
  } else {
    const long m = std::lround(seconds / 60);
    std::snprintf(buf, sizeof buf, "%ldh%02ldm", m / 60, m % 60);
  }
  return buf;
}

Progress::Progress(std::string job, int steps, std::string unit, std::vector<double> weights)
    : job_(std::move(job)),
      unit_(std::move(unit)),
      steps_(std::max(1, steps)),
      weights_(std::move(weights)),
      tty_(isatty(2) != 0),
      interval_(progress_interval_from_env()) {
  if (weights_.size() != static_cast<std::size_t>(steps_)) weights_.assign(steps_, 1.0);
  next_line_ = std::min(kFirstLine, interval_);
}

Progress::~Progress() {
  if (line_drawn_) clear_line();
  // A log says how the job ended, unless it is unwinding on an error (the error says that).
  if (printed_ && std::uncaught_exceptions() == 0) {
    const std::string what = steps_ > 1 ? std::to_string(steps_) + " runs" : name_;
    std::fprintf(stderr, "kvscope %s: %s%sdone in %s\n", job_.c_str(), what.c_str(),
                 what.empty() ? "" : " ", format_duration(elapsed()).c_str());
    std::fflush(stderr);
  }
}

double Progress::elapsed() const {
  return std::chrono::duration<double>(Clock::now() - start_).count();
}

double Progress::fraction() const {
  const double all = std::accumulate(weights_.begin(), weights_.end(), 0.0);
  if (!(all > 0)) return 0.0;
  const int at = std::max(index_, 0);
  double before = 0.0;
  for (int i = 0; i < at && i < steps_; ++i) before += weights_[static_cast<std::size_t>(i)];
  const double within =
      total_ > 0 ? static_cast<double>(std::clamp(done_, 0L, total_)) / static_cast<double>(total_)
                 : 0.0;
  const double current = at < steps_ ? weights_[static_cast<std::size_t>(at)] : 0.0;
  return std::clamp((before + current * within) / all, 0.0, 1.0);
}

std::string Progress::text() const {
  std::string line = "kvscope " + job_ + ":";
  if (!name_.empty()) line += " " + name_;
  if (steps_ > 1)
    line += " (" + std::to_string(std::max(index_, 0) + 1) + "/" + std::to_string(steps_) + ")";
  if (total_ > 0) {
    char buf[96];
    const long done = std::clamp(done_, 0L, total_);
    std::snprintf(buf, sizeof buf, " %.0f%% (%ld/%ld%s%s)",
                  std::floor(100.0 * static_cast<double>(done) / static_cast<double>(total_)), done,
                  total_, unit_.empty() ? "" : " ", unit_.c_str());
    line += buf;
  }
  const double t = elapsed(), f = fraction();
  line += ", " + format_duration(t) + " elapsed";
  // An ETA once there is something to extrapolate from: a second and 0.5% of the job.
  if (f >= 0.005 && f < 1 && t >= 1.0) line += ", ETA " + format_duration(t * (1 - f) / f);
  return line;
}

void Progress::clear_line() {
  std::fputs("\r\033[K", stderr);
  std::fflush(stderr);
  line_drawn_ = false;
}

void Progress::draw(bool force) {
  const double t = elapsed();
  if (tty_) {
    if (!force && line_drawn_ && t - last_draw_ < kRedraw) return;
    last_draw_ = t;
    std::fprintf(stderr, "\r%s\033[K", text().c_str());
    std::fflush(stderr);
    line_drawn_ = true;
    return;
  }
  if (interval_ < 0 || t < next_line_) return;
  std::fprintf(stderr, "%s\n", text().c_str());
  std::fflush(stderr);
  printed_ = true;
  // The next line one interval on, never a burst to catch up after a long silent stretch.
  next_line_ = std::max(next_line_ + interval_, t + interval_ * 0.5);
  if (interval_ == 0) next_line_ = t;
}

void Progress::step(std::string name) {
  ++index_;
  name_ = std::move(name);
  done_ = total_ = 0;
  draw(true);
}

void Progress::update(long done, long total) {
  done_ = done;
  total_ = total;
  draw(false);
}

void Progress::message(const std::string& line) {
  const bool was_drawn = line_drawn_;
  if (was_drawn) clear_line();
  std::fprintf(stderr, "%s\n", line.c_str());
  std::fflush(stderr);
  if (was_drawn) draw(true);
}

}  // namespace kvscope::cli
