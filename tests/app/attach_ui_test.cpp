// kvscope-ui attached live to a KV-event stream: an in-test engine rank (tests/trace's
// publisher, the engines' exact framing) publishes golden batches; the shell follows them in the
// Live workspace, its timeline grows one step per batch, the Live attach panel's figures and
// series match what was published, the status bar says connected, Detach keeps the recording,
// and a bad endpoint is an error modal that keeps the run loaded. Also bind mode (the engine
// connects to kvscope) and a publisher that never appears.
#include <gtest/gtest.h>
#include <imgui.h>
#include <imgui_internal.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "app/core/attach_feed.h"
#include "app/core/headless.h"
#include "app/core/run_session.h"
#include "app/core/shell.h"
#include "app/panels/attach_panel.h"
#include "tests/app/ui_test_support.h"
#include "tests/trace/kv_event_payloads.h"
#include "tests/trace/kv_test_publisher.h"

namespace kvscope::ui {
namespace {

using Clock = std::chrono::steady_clock;
using kvscope::test::batch_array;
using kvscope::test::Packer;
using kvscope::test::Publisher;
using kvscope::test::removed_array;
using kvscope::test::stored_array;
using test::panel_vertices;
using test::run_checked_frame;

std::string minimal_scenario() {
  return std::string(KVSCOPE_SOURCE_DIR) + "/scenarios/minimal.json";
}

// Draws frames until `done` (at most 20 s of wall time); false on timeout.
bool frames_until(UiShell& shell, const std::function<bool()>& done, const std::string& what) {
  const Clock::time_point end = Clock::now() + std::chrono::seconds(20);
  while (!done()) {
    if (Clock::now() > end) return false;
    run_checked_frame([&] { shell.frame(1.0 / 60.0); }, what);
  }
  return true;
}

// A BlockStored in vLLM's positional layout with a LoRA adapter and a medium.
std::string stored_with(std::vector<kvscope::test::WireHash> hashes,
                        std::optional<kvscope::test::WireHash> parent, const char* lora,
                        const char* medium) {
  Packer p;
  p.array(2).f64(2.0).array(1);
  p.array(8).str("BlockStored").array(static_cast<std::uint32_t>(hashes.size()));
  for (const auto& h : hashes) p.hash(h);
  if (parent)
    p.hash(*parent);
  else
    p.nil();
  p.array(0).i64(16);
  if (lora)
    p.i64(3);
  else
    p.nil();
  p.str(medium);
  if (lora)
    p.str(lora);
  else
    p.nil();
  return p.bytes();
}

TEST(AttachUi, FollowsALiveStreamAndDetachKeepsTheRecording) {
  HeadlessImGui imgui(ImVec2(1600, 1000));
  Publisher engine("tcp://127.0.0.1:*", "tcp://127.0.0.1:*");
  // History buffered before kvscope attaches (it comes by replay).
  engine.publish(batch_array(1.0, {stored_array({1, 2, 3}, std::nullopt, 16)}));
  ASSERT_TRUE(engine.wait_published(1));
  UiShell shell(RunSession::open(minimal_scenario(), /*bookkeeping=*/true), imgui.fonts());
  AttachRequest req;
  req.endpoint = engine.endpoint();
  req.replay = engine.replay_endpoint();
  req.slots = 256;
  ASSERT_TRUE(shell.attach_live(req));
  EXPECT_EQ(shell.workspace(), UiShell::kLiveWorkspace);
  ASSERT_NE(shell.state().source().attach_feed(), nullptr);
  EXPECT_EQ(shell.state().header().num_blocks, 256);
  ASSERT_TRUE(frames_until(
      shell, [&] { return engine.subscriptions() > 0 && engine.replay_requests() > 0; },
      "waiting for the subscription"));
  // Two conversations on the system prompt (3 is shared), one under a LoRA adapter; a CPU copy.
  engine.publish(batch_array(2.0, {stored_array({10, 11}, 3, 16)}));
  engine.publish(stored_with({20}, 3, "sql-lora", "GPU"));
  engine.publish(stored_with({30}, std::nullopt, nullptr, "CPU"));
  engine.publish(batch_array(3.0, {removed_array({11})}));
  const std::shared_ptr<AttachFeed> feed = shell.state().source().attach_feed();
  ASSERT_TRUE(frames_until(
      shell,
      [&] {
        const auto s = feed->snapshot();
        return s->totals.batches == 5 && shell.state().num_steps() == 6;
      },
      "following the stream"));
  // The timeline: step 0 is the attach, then one step per batch; following live.
  EXPECT_TRUE(shell.state().follow_live);
  EXPECT_EQ(shell.state().step(), 5);
  EXPECT_EQ(shell.state().metrics().blocks_cached_free, 6);  // 1 2 3 10 20 (GPU) + 30 (CPU)
  ASSERT_TRUE(frames_until(
      shell, [&] { return feed->snapshot()->counters.blocks_removed == 1; }, "snapshot"));
  const std::shared_ptr<const AttachSnapshot> snap = feed->snapshot();
  EXPECT_EQ(snap->counters.live, 6);
  EXPECT_EQ(snap->totals.replayed, 1);
  EXPECT_EQ(snap->block_size, 16);
  EXPECT_EQ(snap->ranks.at(0).connection, KvConnection::kConnected);
  ASSERT_EQ(snap->shared_prefixes.size(), 1u);  // block 3: continued by 10 and by 20
  EXPECT_EQ(snap->shared_prefixes[0].blocks, 3);
  EXPECT_EQ(snap->shared_prefixes[0].branches, 2);
  EXPECT_EQ(snap->loras.at("sql-lora").live, 1);
  EXPECT_EQ(snap->loras.at("base").live, 5);
  // Series per (rank, medium): the last sample holds the live counts.
  const std::vector<PlotSeries> live = AttachPanel::live_series(*snap);
  ASSERT_EQ(live.size(), 2u);
  std::map<std::string, double> last;
  for (const PlotSeries& s : live) last[s.label] = s.y.back();
  EXPECT_EQ(last["GPU"], 5);
  EXPECT_EQ(last["CPU"], 1);
  const std::vector<PlotSeries> rates = AttachPanel::rate_series(*snap);
  ASSERT_EQ(rates.size(), 3u);
  // Rate x interval, summed, gives back the blocks stored between the first and the last sample.
  double stored = 0.0;
  for (std::size_t i = 0; i < rates[0].x.size(); ++i) {
    EXPECT_GE(rates[0].y[i], 0.0);
    const double t1 = rates[0].x[i];
    double t0 = 0.0;  // the sample before this one
    for (const AttachSample& a : snap->samples)
      if (a.seconds < t1) t0 = a.seconds;
    stored += rates[0].y[i] * (t1 - t0);
  }
  EXPECT_NEAR(stored + static_cast<double>(snap->samples.front().stored), 7.0, 1e-6);
  // The plots' time axis and the scrubber agree: the newest step is at the newest sample.
  EXPECT_EQ(step_at_seconds(*snap, snap->samples.back().seconds), 5);
  EXPECT_EQ(seconds_at_step(*snap, 5), [&] {
    for (const AttachSample& a : snap->samples)
      if (a.batches >= 5) return a.seconds;
    return -1.0;
  }());
  // The status bar and the panel, as a frame drawn after the last batch shows them (the
  // conditions above may have turned true between frames).
  run_checked_frame([&] { shell.frame(1.0 / 60.0); }, "status bar after the last batch");
  EXPECT_NE(shell.attach_status().find("attached to " + engine.endpoint()), std::string::npos)
      << shell.attach_status();
  EXPECT_NE(shell.attach_status().find("rank 0 connected"), std::string::npos);
  EXPECT_NE(shell.attach_status().find("5 batches"), std::string::npos) << shell.attach_status();
  EXPECT_GT(panel_vertices("Live attach"), 0);
  EXPECT_GT(panel_vertices("Prefix cache"), 0);
  EXPECT_GT(panel_vertices("Block pool"), 0);
  // The panel alone, squeezed to tiny windows, draws without ImGui errors.
  AttachPanel alone;
  for (int frame = 0; frame < 4; ++frame) {
    ImGui::SetNextWindowSize(frame < 2 ? ImVec2(90.0f, 60.0f) : ImVec2(300.0f, 200.0f));
    run_checked_frame(
        [&] {
          ImGui::Begin("Live attach alone");
          alone.draw(shell.state());
          ImGui::End();
        },
        "the Live attach panel alone, tiny");
  }
  // Scrubbing back shows the pool as it was.
  shell.state().set_step(1);
  run_checked_frame([&] { shell.frame(1.0 / 60.0); }, "scrubbed back");
  EXPECT_EQ(shell.state().metrics().blocks_cached_free, 3);
  // Detach: the stream stops, what was recorded stays, and saves as a recording.
  shell.state().detach_request = true;
  run_checked_frame([&] { shell.frame(1.0 / 60.0); }, "detach");
  EXPECT_FALSE(shell.session()->is_running());
  EXPECT_TRUE(feed->snapshot()->stopped);
  engine.publish(batch_array(4.0, {stored_array({40}, std::nullopt, 16)}));
  for (int f = 0; f < 10; ++f) run_checked_frame([&] { shell.frame(1.0 / 60.0); }, "detached");
  EXPECT_EQ(shell.state().num_steps(), 6);
  EXPECT_NE(shell.attach_status().find("detached from"), std::string::npos);
  const std::string kvr = testing::TempDir() + "attach_ui_test.kvr";
  shell.session()->timeline()->save(kvr);
  EXPECT_EQ(Timeline::load(kvr).num_steps(), 6);
}

// "Why did my prefix miss?" in the Live workspace: a lookup set on the feed is answered by every
// snapshot as the stream changes, the prefix tree outlines the matched blocks, and after detach
// a new lookup is answered against the state at detach.
TEST(AttachUi, APrefixLookupFollowsTheStreamAndOutlinesItsBlocks) {
  HeadlessImGui imgui(ImVec2(1280, 720));
  Publisher engine("tcp://127.0.0.1:*", "");
  UiShell shell(RunSession::open(minimal_scenario(), /*bookkeeping=*/true), imgui.fonts());
  AttachRequest req;
  req.endpoint = engine.endpoint();
  req.slots = 256;
  ASSERT_TRUE(shell.attach_live(req));
  ASSERT_TRUE(frames_until(
      shell, [&] { return engine.subscriptions() > 0; }, "waiting for the subscription"));
  // A chain of three blocks holding tokens 0..47 (Packer::tokens counts up from 0).
  engine.publish(batch_array(1.0, {stored_array({1, 2, 3}, std::nullopt, 16)}));
  const std::shared_ptr<AttachFeed> feed = shell.state().source().attach_feed();
  ASSERT_TRUE(frames_until(
      shell, [&] { return feed->snapshot()->counters.live == 3; }, "the chain"));
  run_checked_frame([&] { shell.frame(1.0 / 60.0); }, "before the lookup");
  const int tree_before = panel_vertices("Prefix cache");
  KvLookupQuery q;
  for (std::int64_t t = 0; t < 40; ++t) q.tokens.push_back(t);  // 2 full blocks, 8 over
  feed->set_lookup(q);
  ASSERT_TRUE(frames_until(
      shell, [&] { return !feed->snapshot()->lookup_rows.empty(); }, "the lookup's rows"));
  KvLookupRow row = feed->snapshot()->lookup_rows.at(0);
  EXPECT_EQ(row.matched_blocks, 2);
  EXPECT_EQ(row.reason, KvMissReason::kAllHeld);
  EXPECT_EQ(row.slots.size(), 2u);
  run_checked_frame([&] { shell.frame(1.0 / 60.0); }, "with the lookup");
  EXPECT_GT(panel_vertices("Prefix cache"), tree_before) << "the matched blocks are outlined";
  // The engine drops block 2: the next snapshot's answer says so.
  engine.publish(batch_array(2.0, {removed_array({2})}));
  ASSERT_TRUE(frames_until(
      shell,
      [&] {
        const auto s = feed->snapshot();
        return !s->lookup_rows.empty() && s->lookup_rows[0].reason == KvMissReason::kRemoved;
      },
      "the removal in the lookup"));
  EXPECT_EQ(feed->snapshot()->lookup_rows[0].matched_blocks, 1);
  EXPECT_EQ(feed->snapshot()->lookup_rows[0].removed_seq, 1);
  // Detached: a new lookup is answered at once, against the state at detach.
  shell.state().detach_request = true;
  run_checked_frame([&] { shell.frame(1.0 / 60.0); }, "detach");
  ASSERT_TRUE(feed->snapshot()->stopped);
  q.tokens.resize(16);
  feed->set_lookup(q);
  ASSERT_EQ(feed->snapshot()->lookup_rows.size(), 1u);
  EXPECT_EQ(feed->snapshot()->lookup_rows[0].reason, KvMissReason::kAllHeld);
  feed->set_lookup(std::nullopt);
  EXPECT_TRUE(feed->snapshot()->lookup_rows.empty());
  EXPECT_GT(panel_vertices("Live attach"), 0);
}

TEST(AttachUi, BadEndpointsAreAModalAndTheRunStays) {
  HeadlessImGui imgui(ImVec2(1200, 800));
  UiShell shell(RunSession::open(minimal_scenario(), /*bookkeeping=*/true), imgui.fonts());
  run_checked_frame([&] { shell.frame(1.0 / 60.0); }, "first frame");
  AttachRequest req;
  req.endpoint = "tcp://*:5557";  // the engine's bind address, not one to connect to
  EXPECT_FALSE(shell.attach_live(req));
  EXPECT_NE(shell.error_text().find("expected the engine's host to connect to"), std::string::npos)
      << shell.error_text();
  EXPECT_EQ(shell.session()->path(), minimal_scenario());
  req.endpoint = "udp://host:1";
  EXPECT_FALSE(shell.attach_live(req));
  EXPECT_NE(shell.error_text().find("expected tcp://HOST:PORT or ipc://PATH"), std::string::npos);
  req.endpoint = "tcp://127.0.0.1:5557";
  req.slots = 4;
  EXPECT_FALSE(shell.attach_live(req));
  EXPECT_NE(shell.error_text().find("slots"), std::string::npos) << shell.error_text();
  for (int f = 0; f < 3; ++f) run_checked_frame([&] { shell.frame(1.0 / 60.0); }, "modal");
  EXPECT_EQ(shell.session()->path(), minimal_scenario());
}

// Nobody publishes: the status says so within a second, frames keep coming, nothing hangs.
TEST(AttachUi, APublisherThatNeverAppearsIsShownNotWaitedFor) {
  HeadlessImGui imgui(ImVec2(1200, 800));
  UiShell shell(RunSession::open(minimal_scenario(), /*bookkeeping=*/true), imgui.fonts());
  AttachRequest req;
  req.endpoint = "tcp://127.0.0.1:1";  // nothing listens on port 1
  req.replay = "tcp://127.0.0.1:11";
  req.dp = 2;
  ASSERT_TRUE(shell.attach_live(req));
  ASSERT_TRUE(frames_until(
      shell,
      [&] {
        return shell.attach_status().find("rank 0 not connected, rank 1 not connected") !=
               std::string::npos;
      },
      "waiting for the status"))
      << shell.attach_status();
  EXPECT_EQ(shell.state().num_steps(), 1);
  EXPECT_GT(panel_vertices("Live attach"), 0);
  const Clock::time_point start = Clock::now();
  shell.session()->stop();  // prompt, even with a replay request unanswered
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(3));
}

TEST(AttachUi, BindModeListensForAnEngineThatConnects) {
  HeadlessImGui imgui(ImVec2(1200, 800));
  UiShell shell(RunSession::open(minimal_scenario(), /*bookkeeping=*/true), imgui.fonts());
  AttachRequest req;
  req.endpoint = "ipc://" + testing::TempDir() + "kvscope-ui-bind-test";
  req.bind = true;
  ASSERT_TRUE(shell.attach_live(req));
  ASSERT_TRUE(frames_until(
      shell, [&] { return shell.attach_status().find("rank 0 listening") != std::string::npos; },
      "rank 0 listening"))
      << shell.attach_status();
  EXPECT_NE(shell.attach_status().find("listening at " + req.endpoint), std::string::npos);
  Publisher engine(req.endpoint, "", "", /*connect=*/true);
  ASSERT_TRUE(frames_until(
      shell, [&] { return engine.subscriptions() > 0; }, "subscription"));
  engine.publish(batch_array(1.0, {stored_array({1, 2}, std::nullopt, 16)}));
  ASSERT_TRUE(frames_until(
      shell, [&] { return shell.state().num_steps() == 2; }, "the engine's first batch"));
  ASSERT_TRUE(frames_until(
      shell, [&] { return shell.attach_status().find("rank 0 connected") != std::string::npos; },
      "connected"))
      << shell.attach_status();
  EXPECT_EQ(shell.state().source().attach_feed()->snapshot()->counters.live, 2);
  // Attaching again to the same address: the first attach lets go of its socket first.
  ASSERT_TRUE(shell.attach_live(req)) << shell.error_text();
}

}  // namespace
}  // namespace kvscope::ui
