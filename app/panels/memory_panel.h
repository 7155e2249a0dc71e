// Memory vs context: KV bytes against context length for published model shapes and the loaded
// run, per KV format, on log axes with GPU memory lines to read off the longest context.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "app/core/memory_job.h"
#include "app/core/memory_shapes.h"
#include "app/panels/panel.h"
#include "app/widgets/plot.h"
#include "engine/analysis/memory_math.h"

namespace kvscope::ui {

class MemoryPanel final : public Panel {
 public:
  MemoryPanel();
  const char* title() const override { return "Memory vs context"; }
  std::string help() const override;
  const char* docs_page() const override { return "docs/ui/pool.md#memory-vs-context"; }
  void draw(AppState& state) override;
  // The measurement (Measure button): running, and its result once it finished (null before).
  bool busy() const override { return job_.busy(); }
  const MemoryMeasurement* measured() const { return measured_.get(); }
  // Starts the measurement as the button does (tests; headless runs).
  void start_measurement(const AppState& state);
  // The formula lines: each published shape at the chosen format(s), then the loaded run's line;
  // dimmed and thinner when measured points are shown.
  std::vector<PlotSeries> formula_series(const AppState& state, bool has_measured) const;
  // Ring attention over `devices` (the "ring" combo): 1 is one device.
  void set_ring(int devices) { ring_ = devices; }
  void wait_for_measurement() { job_.wait(); }
  // The measured points as plot series (allocator, OS pages), empty when nothing was measured.
  std::vector<PlotSeries> measured_series(const AppState& state) const;
  // The plot's footer: what its lines and dots are (formulas; measured points when there are
  // some). `format` indexes kv_format_bytes(), `num_formats` meaning all of them.
  std::string shown_text(const AppState& state, std::size_t num_formats, int format) const;

  // The table's ring column for `shape`: one ring step's bytes (one layer of a device's chunk
  // of a 128K-token sequence) and whether an H100's attention hides it over NVLink 4 ("-" on one
  // device or without the shape's heads).
  std::string ring_step_text(const KvShape& shape, double bytes_per_token) const;

 private:
  // The formats to draw (radio buttons, or a combo in a short panel), "loaded run", the ring and
  // the formula.
  void draw_format_picker();
  void draw_ring_combo();
  // Whether `shape` is drawn: every shape on one device, the full-attention ones on a ring.
  bool drawn(const KvShape& shape) const;
  // One ring step of `shape` at 128K tokens: the split and its timing (none on one device).
  struct RingStep {
    RingSplit split;
    RingTiming timing;
  };
  std::optional<RingStep> ring_step(const KvShape& shape, double bytes_per_token) const;
  static std::string ring_step_text(const RingStep& r);
  void draw_ring_step(const KvShape& shape, double bytes_per_token) const;
  void draw_table(const AppState& state, double bytes_per_element);
  // The "Measure" row: the button, the job's progress and Cancel, or what was measured.
  void draw_measure_row(const AppState& state);

  MemoryJob job_;
  std::shared_ptr<MemoryMeasurement> measured_;
  std::string measured_for_;  // model source of the run the measurement belongs to
  bool cancelled_ = false;
  std::vector<KvShape> shapes_;
  mutable std::vector<AllocatorPoint> hybrid_points_;  // the hybrid shape by the allocator
  int format_ = 0;  // index into kv_format_bytes(), or the count for "all"
  bool show_loaded_ = true;
  // Ring attention: one sequence split over this many devices; the lines then show one device's
  // share, for the shapes whose whole cache grows with context (no window, no SSM state).
  int ring_ = 1;
  std::string export_message_;
};

}  // namespace kvscope::ui
