// DataSource: what the UI reads about a run (header, per-step metrics, pool state at any step).
// The Timeline adapter (timeline_source.h) implements it for real runs; the synthetic generator
// (demo/) only serves the frame-time benchmark and the 100k-block test.
#pragma once

#include <span>
#include <string>
#include <vector>

#include <memory>

#include "engine/model/tokenizer.h"
#include "engine/trace/timeline.h"

namespace kvscope::ui {

struct RunInfo;
class AttachFeed;

class DataSource {
 public:
  virtual ~DataSource() = default;
  virtual const TimelineHeader& header() const = 0;
  virtual int num_steps() const = 0;                             // closed steps, >= 1
  virtual std::span<const StepMetrics> all_metrics() const = 0;  // [num_steps]
  virtual void state_at(int step, PoolState& out) const = 0;     // reuses out's storage
  virtual bool is_demo() const = 0;               // synthetic data, labelled in the UI
  virtual bool is_live() const { return false; }  // steps are still being appended
  virtual std::string describe() const = 0;       // one line for the title/status bar
  // For the text panels: the events of one step, the tokenizer (null when none matches the model,
  // and for recordings), the text of the token ids (the tokenizer's, or the pieces a recording
  // carries; null: ids shown) and a request's prompt token ids (empty when unknown, e.g. for
  // recordings without token text).
  virtual std::span<const Event> events_at(int) const { return {}; }
  virtual const Tokenizer* tokenizer() const { return nullptr; }
  virtual const TokenText* token_text() const { return nullptr; }
  virtual std::span<const int> prompt_tokens(int) const { return {}; }
  // How a scenario run was started (null for recordings and demo data).
  virtual std::shared_ptr<const RunInfo> run_info() const { return nullptr; }
  // The live KV-event stream this run follows (File > Attach), null otherwise.
  virtual std::shared_ptr<AttachFeed> attach_feed() const { return nullptr; }
  // Token eviction: [position] 1 where the sequence's token is still in its cache at `step`, 0
  // where it was evicted; empty when the run records no per-position eviction (nothing greyed).
  virtual std::vector<std::uint8_t> slot_live(int /*request*/, int /*step*/) const { return {}; }
};

}  // namespace kvscope::ui
