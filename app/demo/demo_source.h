// SYNTHETIC POOL STATES (not a real run): a deterministic, fabricated paged-KV history at any size
// (100,000 blocks and more). Used only by the frame-time benchmark and the 100k-block map test;
// the app itself always shows real runs. Labelled "demo data" wherever it is shown.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "app/core/data_source.h"

namespace kvscope::ui {

struct DemoConfig {
  int num_blocks = 1536;
  int block_size = 16;
  int num_steps = 480;
  std::uint64_t seed = 7;
};

struct DemoSim;  // the fabricated scheduler state (demo_source.cpp)

class DemoSource final : public DataSource {
 public:
  explicit DemoSource(DemoConfig config = {});
  ~DemoSource() override;

  const TimelineHeader& header() const override { return header_; }
  int num_steps() const override { return static_cast<int>(metrics_.size()); }
  std::span<const StepMetrics> all_metrics() const override { return metrics_; }
  void state_at(int step, PoolState& out) const override;
  bool is_demo() const override { return true; }
  std::string describe() const override;

 private:
  static constexpr int kSnapshotEvery = 32;
  DemoConfig config_;
  TimelineHeader header_;
  std::vector<StepMetrics> metrics_;                 // [num_steps]
  std::vector<std::unique_ptr<DemoSim>> snapshots_;  // state after steps 0, 32, 64, ...
};

}  // namespace kvscope::ui
