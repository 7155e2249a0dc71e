// Recording round trip, bad-file errors (byte offsets), Chrome trace export, and reader safety
// while a writer appends.
#include <gtest/gtest.h>

#include <atomic>
#include <fstream>
#include <set>
#include <thread>

#include <nlohmann/json.hpp>

#include "engine/common/error.h"
#include "tests/sched/sim_test_support.h"

namespace kvscope {
namespace {

std::shared_ptr<const Timeline> recorded_run() {
  SimConfig c;
  c.block_size = 8;
  c.num_blocks = 16;
  c.preemption = PreemptionMode::kSwap;
  c.host_blocks = 8;
  c.title = "io test";
  Simulator sim(c, test::real_sim_model(), test::mixed_requests(10));
  sim.run(5000);
  return sim.timeline();
}

std::string error_of(const std::string& path) {
  try {
    Timeline::load(path);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(TimelineIo, RoundTripKeepsEverything) {
  auto t = recorded_run();
  const std::string path = test::temp_path("round.kvr");
  t->save(path);
  Timeline back = Timeline::load(path);
  EXPECT_EQ(back.header().title, "io test");
  EXPECT_EQ(back.header().allocator, "paged");
  EXPECT_EQ(back.header().num_blocks, 16);
  EXPECT_DOUBLE_EQ(back.header().kv_bytes_per_token, t->header().kv_bytes_per_token);
  ASSERT_EQ(back.num_steps(), t->num_steps());
  ASSERT_TRUE(std::equal(back.events().begin(), back.events().end(), t->events().begin(),
                         t->events().end()));
  for (int s = 0; s < t->num_steps(); ++s) {
    ASSERT_EQ(back.events_at(s).size(), t->events_at(s).size());
    EXPECT_EQ(back.metrics(s).slots_filled, t->metrics(s).slots_filled);
    EXPECT_EQ(back.metrics(s).preemptions, t->metrics(s).preemptions);
    const PoolState a = back.state_at(s), b = t->state_at(s);
    for (std::size_t i = 0; i < a.blocks.size(); ++i) {
      ASSERT_EQ(a.blocks[i].owner, b.blocks[i].owner);
      ASSERT_EQ(a.blocks[i].filled, b.blocks[i].filled);
    }
  }
  // Saving the loaded timeline gives the same bytes.
  const std::string again = test::temp_path("round2.kvr");
  back.save(again);
  EXPECT_EQ(test::read_bytes(path), test::read_bytes(again));
}

TEST(TimelineIo, BadFilesGiveClearErrors) {
  auto t = recorded_run();
  const std::string good = test::temp_path("good.kvr");
  t->save(good);
  const std::vector<char> bytes = test::read_bytes(good);
  const std::string bad = test::temp_path("bad.kvr");

  EXPECT_NE(error_of(test::temp_path("missing.kvr")).find("cannot open"), std::string::npos);
  for (std::size_t cut :
       {std::size_t{0}, std::size_t{5}, std::size_t{30}, bytes.size() / 2, bytes.size() - 1}) {
    test::write_bytes(
        bad, std::vector<char>(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(cut)));
    const std::string err = error_of(bad);
    EXPECT_NE(err.find(bad + ": byte "), std::string::npos) << "cut at " << cut << ": " << err;
    EXPECT_NE(err.find("expected"), std::string::npos) << err;
  }
  test::write_bytes(bad, std::vector<char>(bytes.begin(), bytes.begin() + 100));
  EXPECT_NE(error_of(bad).find("truncated"), std::string::npos) << error_of(bad);

  std::vector<char> magic = bytes;
  magic[0] = 'X';
  test::write_bytes(bad, magic);
  EXPECT_NE(error_of(bad).find("byte 0: expected the magic"), std::string::npos) << error_of(bad);

  std::vector<char> version = bytes;
  version[8] = 9;
  test::write_bytes(bad, version);
  EXPECT_NE(error_of(bad).find("byte 8: expected version 1 to 2 (this build reads up to 2), got 9"),
            std::string::npos)
      << error_of(bad);

  std::vector<char> flipped = bytes;
  flipped[bytes.size() - 20] ^= 0x40;  // inside the last step's metrics
  test::write_bytes(bad, flipped);
  EXPECT_NE(error_of(bad).find("checksum"), std::string::npos) << error_of(bad);

  std::vector<char> trailing = bytes;
  trailing.push_back(0);
  test::write_bytes(bad, trailing);
  EXPECT_NE(error_of(bad).find("trailing"), std::string::npos) << error_of(bad);
}

TEST(TimelineIo, ChromeTraceHasSpansSlicesAndCounters) {
  auto t = recorded_run();
  const std::string path = test::temp_path("trace.json");
  t->export_chrome_trace(path);
  const auto doc = nlohmann::json::parse(test::read_text(path));
  int steps = 0, counters = 0, running = 0, swapped = 0;
  std::set<int> request_tracks;
  for (const auto& e : doc.at("traceEvents")) {
    const std::string ph = e.at("ph");
    if (ph == "X" && e.at("pid") == 1) ++steps;
    if (ph == "C") ++counters;
    if (ph == "X" && e.at("pid") == 2) {
      request_tracks.insert(e.at("tid").get<int>());
      running += e.at("name") == "running";
      swapped += e.at("name") == "swapped";
      EXPECT_GT(e.at("dur").get<long>(), 0);
    }
  }
  EXPECT_EQ(steps, t->num_steps());
  EXPECT_EQ(counters, 2 * t->num_steps());
  EXPECT_EQ(request_tracks.size(), 10u);
  EXPECT_GE(running, 10);
  EXPECT_GT(swapped, 0);
}

TEST(TimelineThreads, ReadersSeeConsistentPrefixesWhileTheWriterAppends) {
  SimConfig c;
  c.block_size = 8;
  c.num_blocks = 16;
  c.preemption = PreemptionMode::kSwap;
  c.host_blocks = 8;
  Simulator sim(c, SimModel{test::real_model().model->config(), nullptr}, test::mixed_requests(10));
  std::shared_ptr<const Timeline> t = sim.timeline();
  std::atomic<bool> stop{false};
  std::atomic<int> reads{0};
  std::string failure;
  std::thread reader([&] {
    std::span<const Event> first_span;
    std::vector<Event> first_copy;
    PoolState state;
    while (!stop.load()) {
      const int steps = t->num_steps();
      if (steps == 0) continue;
      t->state_at(steps - 1, state);
      const std::span<const Event> evs = t->events();
      const std::span<const StepMetrics> ms = t->all_metrics();
      if (static_cast<int>(ms.size()) < steps || state.step != steps - 1) failure = "short read";
      if (first_span.empty() && !evs.empty()) {
        first_span = evs;
        first_copy.assign(evs.begin(), evs.end());
      }
      ++reads;
    }
    // A span taken early still points at the same, unchanged events.
    if (!std::equal(first_span.begin(), first_span.end(), first_copy.begin(), first_copy.end())) {
      failure = "an early span changed";
    }
  });
  while (sim.step()) {
    // Let the reader in while the run is under way (the run is faster than a thread start).
    while (sim.current_step() == 10 && reads.load() < 20) std::this_thread::yield();
  }
  stop = true;
  reader.join();
  EXPECT_EQ(failure, "");
  EXPECT_GT(reads.load(), 0);
}

}  // namespace
}  // namespace kvscope
