// The progress of a long CLI job on stderr (stdout stays the command's parseable output): what
// runs, i/n done, elapsed time and an ETA. One helper for every command.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <vector>

namespace kvscope::cli {

// Seconds between plain progress lines when stderr is not a terminal, from
// $KVSCOPE_PROGRESS_INTERVAL: a number >= 0 (default 5; the first line comes after
// min(2, interval) s, so jobs shorter than that print nothing), or "off" for no lines (returns a
// negative number then). Throws kvscope::Error naming the variable on anything else.
double progress_interval_from_env();

// One job's progress. On a terminal, one line redrawn in place ("\r" + clear to end of line) at
// most every 0.1 s and erased when the job ends; otherwise (a pipe, a log, CI) a plain line
// every progress_interval_from_env() seconds and, when any was printed, one "done" line at the
// end. A job is `steps` runs (formats of a sweep, contexts, ...), each started with step(); the
// ETA weighs the runs by `weights` when given (e.g. the expected cost of each), else equally.
// Not thread-safe: call it from the thread that runs the loop.
//
//   Progress p("eval format-sweep", formats.size(), "positions");
//   for (...) { p.step(name); evaluate(..., p.callback()); }
//
// reads "kvscope eval format-sweep: int8 (3/12) 45% (123/270 positions), 12.3 s elapsed, ETA 40 s".
class Progress {
 public:
  explicit Progress(std::string job, int steps = 1, std::string unit = "",
                    std::vector<double> weights = {});
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  // Starts the next run, named `name` ("int8", "8,192 tokens"); without a call, the job is one
  // unnamed run.
  void step(std::string name);
  // `done` of `total` (in the unit) of the current run; total <= 0 shows no fraction.
  void update(long done, long total);
  void operator()(long done, long total) { update(done, total); }
  // update() as the engine's progress callbacks take it: std::function<void(long, long)>.
  std::function<void(long, long)> callback() {
    return [this](long done, long total) { update(done, total); };
  }
  // A line of the job's own on stderr, printed below (not over) the progress line.
  void message(const std::string& line);
  // Erases the terminal line, before the job prints to stdout (a terminal too); the next update
  // draws it again.
  void clear() {
    if (line_drawn_) clear_line();
  }

  // The line as drawn now, without "\r" or a newline (for tests).
  std::string text() const;

 private:
  using Clock = std::chrono::steady_clock;
  double elapsed() const;
  double fraction() const;  // of the whole job, in [0, 1]
  void draw(bool force);
  void clear_line();

  std::string job_, unit_, name_;
  int steps_;
  std::vector<double> weights_;
  int index_ = -1;  // the current run, 0-based; -1 before the first step()
  long done_ = 0, total_ = 0;
  Clock::time_point start_ = Clock::now();
  bool tty_;
  double interval_;          // between plain lines; < 0: none
  double next_line_;         // elapsed seconds at which the next plain line is due
  double last_draw_ = -1;    // elapsed seconds of the last terminal redraw
  bool line_drawn_ = false;  // a terminal line is on screen
  bool printed_ = false;     // a plain line went out
};

// "0.8 s", "42.0 s", "3m05s", "1h02m".
std::string format_duration(double seconds);

}  // namespace kvscope::cli
