// The new panels' data paths on real runs: policy overrides restart deterministically, the prefix
// tree folded from events matches the pool's cached blocks at every step, the attention capture
// holds real softmax rows, the compare variant runs, and sweep CSVs load or fail with a clear line.
#include <gtest/gtest.h>
#include <imgui.h>
#include <imgui_internal.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <thread>

#include <unistd.h>

#include "app/core/attention_job.h"
#include "app/core/headless.h"
#include "app/core/prefix_tree.h"
#include "app/core/quality_job.h"
#include "app/core/run_session.h"
#include "app/core/shell.h"
#include "app/core/theme.h"
#include "app/panels/attention_panel.h"
#include "app/panels/compare_panel.h"
#include "app/panels/memory_panel.h"
#include "app/panels/quality_panel.h"
#include "engine/common/error.h"
#include "engine/kv/kv_format.h"
#include "engine/scenario/scenario.h"
#include "tests/app/ui_test_support.h"

namespace kvscope::ui {
namespace {

using test::run_checked_frame;

std::string scenario(const char* name) {
  return std::string(KVSCOPE_SOURCE_DIR) + "/scenarios/" + name;
}

TEST(PolicyOverride, RestartsTheScenarioWithTheOverride) {
  PolicyOverride o;
  o.block_size = 8;
  o.k_format = parse_kv_format("int8", "test");
  o.v_format = parse_kv_format("int8", "test");
  std::unique_ptr<RunSession> run = RunSession::open(scenario("minimal.json"), true, o);
  run->wait();
  const std::shared_ptr<const RunInfo> info = run->run_info();
  ASSERT_NE(info, nullptr);
  EXPECT_EQ(info->config.block_size, 8);
  EXPECT_EQ(run->timeline()->header().block_size, 8);
  EXPECT_EQ(info->config.k_format.name(), "int8");
  EXPECT_NE(info->scenario_config.block_size, 8) << "the scenario's own value stays recorded";
  EXPECT_EQ(info->override, o);
  EXPECT_EQ(o.describe(), "block 8, KV int8");
  // Same override twice: byte-identical metrics (deterministic restart).
  std::unique_ptr<RunSession> again = RunSession::open(scenario("minimal.json"), true, o);
  again->wait();
  ASSERT_EQ(again->timeline()->num_steps(), run->timeline()->num_steps());
  for (int s = 0; s < run->timeline()->num_steps(); ++s)
    EXPECT_EQ(again->timeline()->metrics(s).blocks_used, run->timeline()->metrics(s).blocks_used);
}

TEST(PolicyOverride, PoolBytesSetTheBlockCount) {
  std::unique_ptr<RunSession> base = RunSession::open(scenario("minimal.json"), true);
  const std::shared_ptr<const RunInfo> info = base->run_info();
  PolicyOverride o;
  o.pool_bytes = 3 * block_bytes(info->shape, info->config) + 5;
  std::unique_ptr<RunSession> run = RunSession::open(scenario("minimal.json"), true, o);
  EXPECT_EQ(run->run_info()->config.num_blocks, 3);
  EXPECT_EQ(pool_blocks(*info, info->config, o), 3);
}

TEST(PolicyOverride, ImpossibleOverridesAreOneLineErrorsNamingTheField) {
  PolicyOverride o;
  o.allocator = AllocatorKind::kContiguous;  // the scenario caches prefixes
  try {
    RunSession::open(scenario("shared-system-prompt.json"), true, o);
    FAIL() << "prefix caching on the contiguous allocator must be refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("prefix_caching"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("shared-system-prompt.json"), std::string::npos)
        << e.what();
  }
  try {
    RunSession::open(scenario("minimal.json"), true, o);  // 16 blocks, 32 reserved per request
    FAIL() << "a contiguous reservation larger than the pool must be refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("minimal.json: cache"), std::string::npos) << e.what();
  }
}

int peak_blocks(const RunSession& run) {
  int peak = 0;
  for (int s = 0; s < run.timeline()->num_steps(); ++s)
    peak = std::max(peak, static_cast<int>(run.timeline()->metrics(s).blocks_used));
  return peak;
}

// Eviction needs attention scores and K/V, so these runs use the real model (a few seconds).
TEST(PolicyOverride, TokenEvictionPolicyAndBudgetRestartTheRun) {
  PolicyOverride small;
  small.eviction = EvictionKind::kWindow;
  small.eviction_budget = 32;
  EXPECT_EQ(small.describe(), "evict window, budget 32");
  std::unique_ptr<RunSession> a = RunSession::open(scenario("eviction-budget.json"), false, small);
  a->wait();
  EXPECT_EQ(a->run_info()->config.token_eviction.policy.kind, EvictionKind::kWindow);
  EXPECT_EQ(a->run_info()->config.token_eviction.policy.budget, 32);
  PolicyOverride large = small;
  large.eviction_budget = 128;
  std::unique_ptr<RunSession> b = RunSession::open(scenario("eviction-budget.json"), false, large);
  b->wait();
  PolicyOverride off;
  off.eviction = EvictionKind::kNone;
  EXPECT_EQ(off.describe(), "no eviction");
  std::unique_ptr<RunSession> c = RunSession::open(scenario("eviction-budget.json"), false, off);
  c->wait();
  // A smaller budget holds fewer blocks at its peak; no eviction holds the most.
  EXPECT_LT(peak_blocks(*a), peak_blocks(*b));
  EXPECT_LT(peak_blocks(*b), peak_blocks(*c));
  // Eviction on a scenario that swaps is refused with the scenario's name, not run half-way.
  try {
    RunSession::open(scenario("minimal.json"), false, small);
    FAIL() << "token eviction with swap preemption must be refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("minimal.json: cache.token_eviction"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("expected preemption recompute"), std::string::npos)
        << e.what();
  }
}

// The Controls' tier sizes rebuild cache.tiers; the run's tier events reach the prefix tree (its
// tier rows, the nodes reloaded from a tier) and the pool replay (the blocks the block map marks).
TEST(PolicyOverride, KvTierSizesRestartTheRunAndItsReloadsReachThePanels) {
  PolicyOverride o;
  o.host_tier_blocks = 64;
  o.disk_tier_blocks = 0;
  EXPECT_EQ(o.describe(), "host tier 64, disk tier 0");
  std::unique_ptr<RunSession> run = RunSession::open(scenario("kv-tiers.json"), false, o);
  run->wait();
  const SimConfig& c = run->run_info()->config;
  ASSERT_EQ(c.tiers.size(), 1u);
  EXPECT_EQ(c.tiers[0].medium, TierMedium::kHost);
  EXPECT_EQ(c.tiers[0].capacity_blocks, 64);
  const Timeline& t = *run->timeline();
  PrefixTreeFold fold;
  fold.reset(t.header().num_blocks, t.header().block_size);
  std::int64_t reloads = 0;
  bool node_marked = false, block_marked = false;
  for (int s = 0; s < t.num_steps(); ++s) {
    for (const Event& e : t.events_at(s)) {
      fold.apply(e);
      reloads += e.type == EventType::kTierReloaded;
    }
    for (const auto& [b, n] : fold.nodes()) node_marked = node_marked || n.reloaded_from == 0;
    for (const BlockState& b : t.state_at(s).blocks)
      block_marked = block_marked || b.reloaded_from == 0;
  }
  EXPECT_GT(reloads, 0);
  ASSERT_EQ(fold.tiers().size(), 1u);
  EXPECT_FALSE(fold.tiers()[0].disk);
  EXPECT_EQ(fold.tiers()[0].capacity, 64);
  EXPECT_EQ(fold.tiers()[0].reloaded, reloads);
  EXPECT_TRUE(node_marked);
  EXPECT_TRUE(block_marked);
  // The scenario's own host + disk tiers: the blocks the fold places in each tier from the
  // write-back and pass-down events are, at every step, as many as the store says it holds.
  std::unique_ptr<RunSession> both = RunSession::open(scenario("kv-tiers.json"), false);
  both->wait();
  const Timeline& bt = *both->timeline();
  PrefixTreeFold tiers;
  tiers.reset(bt.header().num_blocks, bt.header().block_size);
  std::int64_t on_disk = 0;
  for (int s = 0; s < bt.num_steps(); ++s) {
    for (const Event& e : bt.events_at(s)) tiers.apply(e);
    ASSERT_EQ(tiers.tiers().size(), 2u);
    std::int64_t held[2] = {0, 0};
    for (const auto& [key, b] : tiers.tier_blocks()) {
      ASSERT_TRUE(b.tier == 0 || b.tier == 1);
      ++held[b.tier];
      EXPECT_GE(b.cached_by, 0);
    }
    EXPECT_EQ(held[0], tiers.tiers()[0].held) << "step " << s;
    EXPECT_EQ(held[1], tiers.tiers()[1].held) << "step " << s;
    on_disk = std::max(on_disk, held[1]);
  }
  EXPECT_TRUE(tiers.tiers()[1].disk);
  EXPECT_GT(on_disk, 0);
  // Tier sizes without prefix caching: the Simulator's one line, naming the field.
  o.prefix_caching = false;
  try {
    RunSession::open(scenario("kv-tiers.json"), false, o);
    FAIL() << "tiers without prefix caching must be refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cache.tiers: needs prefix caching"), std::string::npos)
        << e.what();
  }
}

TEST(PolicyOverride, TheShellRestartsOnARequestAndKeepsTheRunOnErrors) {
  HeadlessImGui imgui(ImVec2(1200, 800));
  UiShell shell(RunSession::open(scenario("minimal.json"), true), imgui.fonts());
  PolicyOverride o;
  o.block_size = 4;
  shell.state().restart_request = o;
  run_checked_frame([&] { shell.frame(1.0 / 60.0); }, "restart request");
  shell.finish_opening();  // the new run is shown once its first step is there
  ASSERT_NE(shell.session()->run_info(), nullptr);
  EXPECT_EQ(shell.session()->run_info()->override, o);
  EXPECT_EQ(shell.state().header().block_size, 4);
  shell.restart();  // Ctrl+R keeps the override
  shell.finish_opening();
  EXPECT_EQ(shell.session()->run_info()->override, o);
  PolicyOverride bad;
  bad.prefix_caching = true;
  bad.allocator = AllocatorKind::kContiguous;
  shell.state().restart_request = bad;
  run_checked_frame([&] { shell.frame(1.0 / 60.0); }, "bad restart request");
  shell.finish_opening();
  EXPECT_FALSE(shell.error_text().empty()) << "the bad policy is refused in a modal";
  EXPECT_EQ(shell.session()->run_info()->override, o) << "the previous run stays loaded";
}

// The tree folded from events must agree with the Timeline's own replay at every step: the nodes
// are exactly the cached blocks, and each node hangs under the block of the preceding prefix.
TEST(PrefixTreeFold, MatchesTheCachedBlocksAtEveryStep) {
  std::unique_ptr<RunSession> run = RunSession::open(scenario("shared-system-prompt.json"));
  run->wait();
  const Timeline& t = *run->timeline();
  PrefixTreeFold fold;
  fold.reset(t.header().num_blocks, t.header().block_size);
  std::int64_t max_hits = 0;
  std::size_t max_nodes = 0;
  for (int s = 0; s < t.num_steps(); ++s) {
    for (const Event& e : t.events_at(s)) fold.apply(e);
    const PoolState pool = t.state_at(s);
    std::set<int> cached;
    for (std::size_t b = 0; b < pool.blocks.size(); ++b)
      if (pool.blocks[b].cached || pool.blocks[b].status == BlockStatus::kCachedFree)
        cached.insert(static_cast<int>(b));
    std::set<int> nodes;
    for (const auto& [id, n] : fold.nodes()) {
      nodes.insert(id);
      max_hits = std::max(max_hits, n.hits);
      if (n.logical == 0) {
        EXPECT_EQ(n.parent, -1) << "step " << s << " block " << id;
      } else {
        ASSERT_TRUE(fold.nodes().count(n.parent)) << "step " << s << " block " << id;
        EXPECT_EQ(fold.nodes().at(n.parent).logical, n.logical - 1);
      }
    }
    ASSERT_EQ(nodes, cached) << "step " << s;
    max_nodes = std::max(max_nodes, nodes.size());
  }
  EXPECT_GT(max_nodes, 7u);
  EXPECT_EQ(fold.roots().size(), 1u) << "every request shares the system prompt's first block";
  EXPECT_GE(max_hits, 17) << "17 requests reuse the system prompt's blocks";
  EXPECT_EQ(fold.lookups().size(), 18u);
  EXPECT_EQ(fold.lookups().at(0).reason, MissReason::kFirstOccurrence);
  EXPECT_EQ(fold.hit_tokens_total(), t.all_metrics().back().prefix_hit_tokens);
}

TEST(AttentionJob, CapturesSoftmaxRowsOfTheRealModelInTheBackground) {
  std::unique_ptr<RunSession> run = RunSession::open(scenario("minimal.json"));
  const std::shared_ptr<const RunInfo> info = run->run_info();
  ASSERT_NE(info->model, nullptr);
  const std::vector<int> tokens = info->prompts.at(0);
  ASSERT_GT(tokens.size(), 4u);
  AttentionJob job;
  ASSERT_TRUE(job.start(info->model, info->config, 7, 0, tokens));
  job.cancel_after_finish();
  const std::shared_ptr<AttentionCapture> cap = job.take();
  ASSERT_NE(cap, nullptr);
  ASSERT_TRUE(cap->error.empty()) << cap->error;
  EXPECT_EQ(cap->generation, 7);
  ASSERT_TRUE(cap->recorder->has_full_matrices());
  const int n = static_cast<int>(tokens.size());
  for (int layer = 0; layer < cap->n_layers; ++layer) {
    for (int q = 0; q < n; ++q) {
      double sum = 0.0;
      for (int k = 0; k <= q; ++k) sum += cap->recorder->weight(layer, 1, q, k);
      EXPECT_NEAR(sum, 1.0, 1e-4) << "layer " << layer << " query " << q;
    }
  }
  EXPECT_EQ(job.take(), nullptr) << "a capture is handed over once";
}

// A capture of `tokens` with the run's config changed to K/V `format` (and `preview`, if any).
std::shared_ptr<AttentionCapture> capture_with(const RunInfo& info, const std::string& format,
                                               const std::vector<int>& tokens,
                                               const std::string& preview = "") {
  SimConfig config = info.config;
  config.k_format = config.v_format = parse_kv_format(format, "test");
  std::optional<KvFormat> p;
  if (!preview.empty()) p = parse_kv_format(preview, "test");
  AttentionJob job;
  EXPECT_TRUE(job.start(info.model, config, 1, 0, tokens, p));
  job.cancel_after_finish();
  std::shared_ptr<AttentionCapture> cap = job.take();
  EXPECT_NE(cap, nullptr);
  if (cap != nullptr) {
    EXPECT_TRUE(cap->error.empty()) << cap->error;
  }
  return cap;
}

// A run that evicts tokens: the capture runs the same policy, so a query puts no weight on a key
// the window already dropped, and its row still sums to 1 over the keys it kept.
TEST(AttentionJob, UnderTokenEvictionTheWeightsAreTheEvictedCachesOwn) {
  std::unique_ptr<RunSession> run = RunSession::open(scenario("minimal.json"));
  const std::shared_ptr<const RunInfo> info = run->run_info();
  std::vector<int> tokens;
  for (int i = 0; i < 96; ++i)
    tokens.push_back(
        info->prompts.at(0).at(static_cast<std::size_t>(i) % info->prompts.at(0).size()));
  SimConfig config = info->config;
  config.token_eviction.policy.kind = EvictionKind::kWindow;
  config.token_eviction.policy.budget = 32;
  AttentionJob job;
  ASSERT_TRUE(job.start(info->model, config, 1, 0, tokens));
  job.cancel_after_finish();
  const std::shared_ptr<AttentionCapture> cap = job.take();
  ASSERT_NE(cap, nullptr);
  ASSERT_TRUE(cap->error.empty()) << cap->error;
  EXPECT_TRUE(cap->under_eviction);
  const AttentionRecorder& rec = *cap->recorder;
  ASSERT_TRUE(rec.has_full_matrices());
  for (int q : {40, 95}) {
    for (int layer = 0; layer < cap->n_layers; ++layer) {
      float kept = 0.0f;
      for (int k = 0; k <= q; ++k) {
        const float w = rec.weight(layer, 0, q, k);
        if (k <= q - 32) {
          EXPECT_EQ(w, 0.0f) << "query " << q << " reads evicted key " << k;
        }
        kept += w;
      }
      EXPECT_NEAR(kept, 1.0f, 1e-4f) << "query " << q << " layer " << layer;
    }
  }
  // Without eviction the same query reads the early keys.
  config.token_eviction = {};
  AttentionJob dense;
  ASSERT_TRUE(dense.start(info->model, config, 1, 0, tokens));
  dense.cancel_after_finish();
  const std::shared_ptr<AttentionCapture> full = dense.take();
  ASSERT_NE(full, nullptr);
  EXPECT_FALSE(full->under_eviction);
  float early = 0.0f;
  for (int k = 0; k <= 95 - 32; ++k) early += full->recorder->weight(0, 0, 95, k);
  EXPECT_GT(early, 0.0f);
}

TEST(AttentionJob, MeasuresTheQuantizationErrorOfAQuantizedRun) {
  std::unique_ptr<RunSession> run = RunSession::open(scenario("minimal.json"));
  const std::shared_ptr<const RunInfo> info = run->run_info();
  const std::vector<int> tokens = info->prompts.at(2);
  const auto int8 = capture_with(*info, "int8", tokens);
  ASSERT_NE(int8, nullptr);
  ASSERT_NE(int8->errors, nullptr) << "an int8 run measures its error without asking";
  EXPECT_FALSE(int8->preview.has_value());
  const KvErrorProfile& p = *int8->errors;
  ASSERT_EQ(p.positions, static_cast<int>(tokens.size()));
  ASSERT_EQ(p.k_format, parse_kv_format("int8", "test"));
  // Measured: 0.3% .. 0.6% per KV head on stories260K (symmetric int8 per head).
  for (float e : p.k_error) {
    EXPECT_GT(e, 0.0f);
    EXPECT_LT(e, 0.05f);
  }
  // The recorder watched the int8 run: its rows are still softmax rows.
  for (int q = 0; q < p.positions; ++q) {
    double sum = 0.0;
    for (int k = 0; k <= q; ++k) sum += int8->recorder->weight(2, 3, q, k);
    EXPECT_NEAR(sum, 1.0, 1e-4);
  }
  // int4 (previewed on the same tokens) is worse at every position of every layer.
  const auto int4 = capture_with(*info, "fp32", tokens, "int4");
  ASSERT_NE(int4, nullptr);
  ASSERT_NE(int4->errors, nullptr);
  for (int l = 0; l < p.n_layers; ++l) {
    for (int pos = 0; pos < p.positions; ++pos) {
      double e8 = 0, e4 = 0;
      for (int h = 0; h < p.kv_heads; ++h) {
        e8 += p.k(l, h, pos);
        e4 += int4->errors->k(l, h, pos);
      }
      EXPECT_GT(e4, e8) << "layer " << l << " position " << pos;
    }
  }
}

TEST(AttentionJob, Fp32RunHasNoErrorUnlessAFormatIsPreviewed) {
  std::unique_ptr<RunSession> run = RunSession::open(scenario("minimal.json"));
  const std::shared_ptr<const RunInfo> info = run->run_info();
  const std::vector<int> tokens = info->prompts.at(0);
  const auto plain = capture_with(*info, "fp32", tokens);
  ASSERT_NE(plain, nullptr);
  EXPECT_EQ(plain->errors, nullptr);
  EXPECT_TRUE(plain->errors_note.empty());
  const auto preview = capture_with(*info, "fp32", tokens, "kivi4");
  ASSERT_NE(preview, nullptr);
  ASSERT_NE(preview->errors, nullptr);
  ASSERT_EQ(preview->preview, parse_kv_format("kivi4", "test"));
  // The heatmap still shows the fp32 run: the same weights as the plain capture, bit for bit.
  const int n = static_cast<int>(tokens.size());
  for (int l = 0; l < plain->n_layers; ++l)
    for (int q = 0; q < n; ++q)
      for (int k = 0; k <= q; ++k)
        ASSERT_EQ(preview->recorder->weight(l, 0, q, k), plain->recorder->weight(l, 0, q, k));
  // A short sequence sits in KIVI's open group (residual 32): kept in full precision, no error.
  ASSERT_LT(n, 32);
  for (float e : preview->errors->k_error) EXPECT_EQ(e, 0.0f);
  // One token, and a preview the block size cannot store (a note, the capture still works).
  const auto one = capture_with(*info, "fp32", {1}, "int4");
  ASSERT_NE(one, nullptr);
  ASSERT_NE(one->errors, nullptr);
  EXPECT_EQ(one->errors->positions, 1);
  EXPECT_EQ(one->errors->tv(0, 0, 0), 0.0f);
  SimConfig odd = info->config;
  odd.block_size = 12;
  AttentionJob job;
  ASSERT_TRUE(job.start(info->model, odd, 1, 0, tokens, parse_kv_format("kivi2", "test")));
  job.cancel_after_finish();
  const auto bad = job.take();
  ASSERT_NE(bad, nullptr);
  EXPECT_TRUE(bad->error.empty()) << bad->error;
  ASSERT_NE(bad->recorder, nullptr);
  EXPECT_EQ(bad->errors, nullptr);
  EXPECT_NE(bad->errors_note.find("block"), std::string::npos) << bad->errors_note;
}

// One checked frame of the attention panel alone, in a 1000 x 900 window at the origin.
void draw_attention_frame(AttentionPanel& panel, AppState& state, const std::string& what) {
  test::draw_panel_alone(panel, state, "attention", ImVec2(1000, 900), what);
}

// Draws the attention panel with the overlay on until its capture of `request` is measured, then
// sweeps the mouse over the lower part of the panel (where the strip is) for 40 frames.
const AttentionCapture* draw_with_overlay(AppState& state, AttentionPanel& panel, int request,
                                          const std::string& what) {
  panel.set_error_overlay(true, "int4");
  state.selected_request = request;
  ImGuiIO& io = ImGui::GetIO();
  const auto frame = [&](int f) {
    io.MousePos =
        ImVec2(static_cast<float>(5 + (f * 137) % 990), static_cast<float>(500 + (f * 23) % 400));
    draw_attention_frame(panel, state, what + ", frame " + std::to_string(f));
  };
  for (int f = 0; f < 4; ++f) {
    frame(f);
    panel.wait_for_capture();
  }
  for (int f = 4; f < 44; ++f) frame(f);
  return panel.capture(request);
}

TEST(AttentionPanel, DrawsTheQuantizationErrorOverlay) {
  HeadlessImGui imgui(ImVec2(1000, 900));
  {  // A quantized run (int8 K/V): matrix mode, its own error, no preview.
    PolicyOverride o;
    o.k_format = o.v_format = parse_kv_format("int8", "test");
    std::unique_ptr<RunSession> run = RunSession::open(scenario("minimal.json"), false, o);
    run->wait();
    AppState state(run->make_source());
    state.set_step(60);
    AttentionPanel panel;
    const AttentionCapture* cap = draw_with_overlay(state, panel, 0, "int8 run");
    ASSERT_NE(cap, nullptr);
    ASSERT_NE(cap->errors, nullptr);
    EXPECT_FALSE(cap->preview.has_value());
  }
  {  // An fp32 run past 256 tokens (cumulative mode) previewing int4.
    std::unique_ptr<RunSession> run = RunSession::open(scenario("past-context.json"));
    run->wait();
    AppState state(run->make_source());
    state.set_step(state.num_steps() - 1);
    AttentionPanel panel;
    const AttentionCapture* cap = draw_with_overlay(state, panel, 1, "fp32 run, cumulative");
    ASSERT_NE(cap, nullptr);
    EXPECT_GT(cap->tokens.size(), static_cast<std::size_t>(AttentionPanel::kMatrixLimit));
    ASSERT_NE(cap->errors, nullptr);
    EXPECT_EQ(cap->preview, parse_kv_format("int4", "test"));
  }
  {  // Token eviction: evicted positions are in the strip, greyed, with no error shown.
    std::unique_ptr<RunSession> run = RunSession::open(scenario("eviction-budget.json"));
    run->wait();
    AppState state(run->make_source());
    state.set_step(150);
    const std::vector<std::uint8_t> live = state.source().slot_live(0, 150);
    ASSERT_NE(std::count(live.begin(), live.end(), 0), 0) << "request 0 has evicted tokens";
    AttentionPanel panel;
    const AttentionCapture* cap = draw_with_overlay(state, panel, 0, "eviction run");
    ASSERT_NE(cap, nullptr);
    ASSERT_NE(cap->errors, nullptr);
  }
}

// stories260K's minimal.json run to its end, at step 60 with sequence 0 selected (what the
// attention panel's tests look at).
struct MinimalAtStep60 {
  std::unique_ptr<RunSession> run = RunSession::open(scenario("minimal.json"));
  AppState state = [this] {
    run->wait();
    AppState st(run->make_source());
    st.set_step(60);
    st.selected_request = 0;
    return st;
  }();
};

// Draws the panel until its background capture of sequence 0 is in.
void capture_attention(AttentionPanel& panel, AppState& state) {
  ImGui::GetIO().MousePos = ImVec2(-1, -1);
  for (int f = 0; f < 4; ++f) {
    draw_attention_frame(panel, state, "capturing");
    panel.wait_for_capture();
  }
}

// Sparse attention in the heatmap: with a selection each query row of each head has at most k
// nonzero weights, every row still sums to 1, the dense capture comes back when the selection is
// cleared, and the panel draws (legend, caption, tooltip) with the mouse over the matrix.
TEST(AttentionPanel, ASelectionShowsEachQueryAttendingKKeysOfTheWholeCache) {
  HeadlessImGui imgui(ImVec2(1000, 900));
  MinimalAtStep60 m;
  AppState& state = m.state;
  AttentionPanel panel;
  capture_attention(panel, state);
  const AttentionCapture* dense = panel.capture(0);
  ASSERT_NE(dense, nullptr);
  ASSERT_FALSE(dense->selection.has_value());
  const int n = static_cast<int>(dense->tokens.size());
  ASSERT_GT(n, 16) << "the sequence must be longer than k for the selection to drop keys";
  // The dense weights, kept: the panel replaces its capture when the selection changes.
  const int layers = dense->n_layers, heads = dense->n_heads;
  std::vector<float> dense_w;
  for (int l = 0; l < layers; ++l)
    for (int h = 0; h < heads; ++h)
      for (int q = 0; q < n; ++q)
        for (int k = 0; k < n; ++k) dense_w.push_back(dense->recorder->weight(l, h, q, k));
  const auto dense_at = [&](int l, int h, int q, int k) {
    return dense_w[((static_cast<std::size_t>(l) * heads + h) * n + q) * n + k];
  };
  SparseOptions o;
  o.selector = SelectorKind::kOracle;
  o.topk = 8;
  panel.set_selection(o);
  capture_attention(panel, state);
  const AttentionCapture* sparse = panel.capture(0);
  ASSERT_NE(sparse, nullptr);
  ASSERT_EQ(sparse->selection, o);
  const AttentionRecorder& rec = *sparse->recorder;
  ASSERT_TRUE(rec.has_full_matrices());
  long dropped = 0;
  for (int l = 0; l < sparse->n_layers; ++l) {
    for (int h = 0; h < sparse->n_heads; ++h) {
      for (int q = 0; q < n; ++q) {
        int nonzero = 0;
        double sum = 0.0;
        for (int k = 0; k <= q; ++k) {
          const float w = rec.weight(l, h, q, k);
          nonzero += w > 0.0f ? 1 : 0;
          sum += w;
          dropped += w == 0.0f && dense_at(l, h, q, k) > 0.0f ? 1 : 0;
        }
        ASSERT_LE(nonzero, 8) << "layer " << l << " head " << h << " query " << q;
        ASSERT_NEAR(sum, 1.0, 1e-5);
      }
    }
  }
  EXPECT_GT(dropped, 0);
  ImGuiIO& io = ImGui::GetIO();
  for (int f = 0; f < 30; ++f) {  // the mouse over the matrix: tooltips of picked and skipped keys
    io.MousePos =
        ImVec2(static_cast<float>(60 + (f * 53) % 900), static_cast<float>(120 + (f * 97) % 760));
    draw_attention_frame(panel, state, "selection, frame " + std::to_string(f));
  }
  panel.set_selection(std::nullopt);
  capture_attention(panel, state);
  ASSERT_NE(panel.capture(0), nullptr);
  EXPECT_FALSE(panel.capture(0)->selection.has_value());
  for (int k = 0; k < n; ++k)
    EXPECT_EQ(panel.capture(0)->recorder->weight(1, 0, n - 1, k), dense_at(1, 0, n - 1, k));
}

// A run that attends sparsely itself (cache.sparse_attention): the heatmap shows its own selection,
// the weights its queries computed, with the "keys" combo showing it and no other choice.
TEST(AttentionPanel, ASparseRunShowsItsOwnSelection) {
  HeadlessImGui imgui(ImVec2(1000, 900));
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("kvscope-sparse-run-" + std::to_string(::getpid()) + ".json"))
                               .string();
  {
    std::ofstream out(path);
    out << R"({"format_version": 1, "cache": {"block_size": 8, "num_blocks": 64,
      "sparse_attention": {"selector": "oracle", "topk": 8}},
      "workload": {"requests": [{"prompt": "Once upon a time, there was a little dog", "max_new_tokens": 40}]},
      "steps": 60})";
  }
  std::unique_ptr<RunSession> run = RunSession::open(path);
  run->wait();
  AppState state(run->make_source());
  state.set_step(state.num_steps() - 1);
  state.selected_request = 0;
  AttentionPanel panel;
  capture_attention(panel, state);
  const AttentionCapture* cap = panel.capture(0);
  ASSERT_NE(cap, nullptr);
  ASSERT_TRUE(cap->error.empty()) << cap->error;
  ASSERT_TRUE(cap->selection.has_value());
  EXPECT_EQ(cap->selection->topk, 8);
  const int n = static_cast<int>(cap->tokens.size());
  ASSERT_GT(n, 8);
  int nonzero = 0;
  for (int k = 0; k < n; ++k) nonzero += cap->recorder->weight(2, 1, n - 1, k) > 0.0f ? 1 : 0;
  EXPECT_GT(nonzero, 0);
  EXPECT_LE(nonzero, 8);
  draw_attention_frame(panel, state, "sparse run");
  std::filesystem::remove(path);
}

// A run that evicts tokens has no whole cache to select from: the job says so in one line.
TEST(AttentionPanel, SelectionOnAnEvictingRunIsRefusedWithAReason) {
  std::unique_ptr<RunSession> run = RunSession::open(scenario("eviction-budget.json"));
  run->wait();
  AppState state(run->make_source());
  const std::shared_ptr<const RunInfo> info = state.source().run_info();
  ASSERT_TRUE(info->config.evicts_tokens());
  AttentionJob job;
  SparseOptions o;
  ASSERT_TRUE(job.start(info->model, info->config, 1, 0, {1, 2, 3}, std::nullopt, o));
  job.cancel_after_finish();
  const auto cap = job.take();
  ASSERT_NE(cap, nullptr);
  EXPECT_NE(cap->error.find("key selection keeps the whole cache: a run that evicts has none"),
            std::string::npos)
      << cap->error;
}

// The sink grid: every layer x head, each cell the capture's share on the first token(s), equal to
// the recorder's own figure; a click on a cell opens that head's heatmap.
TEST(AttentionPanel, SinkGridShowsEveryHeadAndAClickOpensIt) {
  HeadlessImGui imgui(ImVec2(1000, 900));
  MinimalAtStep60 m;
  AppState& state = m.state;
  AttentionPanel panel;
  panel.set_sink_grid(true, 1);
  ImGuiIO& io = ImGui::GetIO();
  const auto frame = [&](ImVec2 mouse, bool click, const std::string& what) {
    io.MousePos = mouse;
    io.MouseDown[0] = click;
    draw_attention_frame(panel, state, what);
  };
  capture_attention(panel, state);
  frame(ImVec2(-1, -1), false, "grid");
  const AttentionCapture* cap = panel.capture(0);
  ASSERT_NE(cap, nullptr);
  ASSERT_EQ(panel.grid_values().size(), static_cast<std::size_t>(cap->n_layers * cap->n_heads));
  for (int l = 0; l < cap->n_layers; ++l) {
    for (int h = 0; h < cap->n_heads; ++h) {
      const float v = panel.grid_values()[static_cast<std::size_t>(l * cap->n_heads + h)];
      EXPECT_FLOAT_EQ(v, static_cast<float>(cap->recorder->first_tokens_share(l, h, 1)));
      EXPECT_GE(v, 0.0f);
      EXPECT_LE(v, 1.0f + 1e-5f);
    }
  }
  // Sweep the mouse down the grid's right column until a click lands on a cell: it opens that
  // head (the last head of some layer) and leaves the grid.
  for (int y = 60; y < 880 && panel.sink_grid(); y += 20) {
    frame(ImVec2(600, static_cast<float>(y)), false, "hover");
    frame(ImVec2(600, static_cast<float>(y)), true, "click");
    frame(ImVec2(600, static_cast<float>(y)), false, "release");
  }
  EXPECT_FALSE(panel.sink_grid()) << "no click reached a cell";
  frame(ImVec2(-1, -1), false, "heatmap of the clicked head");
  EXPECT_GT(panel.head(), 0) << "x = 600 is right of the first head's column";
  EXPECT_LT(panel.head(), cap->n_heads);
  EXPECT_LT(panel.layer(), cap->n_layers);
}

// The panel opens on the head that puts the largest share of its attention on the first token
// (the sink lesson), not layer 0 head 0.
TEST(AttentionPanel, OpensOnTheHottestSinkHead) {
  HeadlessImGui imgui(ImVec2(1000, 900));
  MinimalAtStep60 m;
  AppState& state = m.state;
  AttentionPanel panel;
  capture_attention(panel, state);
  draw_attention_frame(panel, state, "focused");
  const AttentionCapture* cap = panel.capture(0);
  ASSERT_NE(cap, nullptr);
  double best = -1.0;
  int best_l = -1, best_h = -1;
  for (int l = 0; l < cap->n_layers; ++l) {
    for (int h = 0; h < cap->n_heads; ++h) {
      const double v = cap->recorder->first_tokens_share(l, h, 1);
      if (v > best) {
        best = v;
        best_l = l;
        best_h = h;
      }
    }
  }
  EXPECT_EQ(panel.layer(), best_l);
  EXPECT_EQ(panel.head(), best_h);
  EXPECT_FALSE(best_l == 0 && best_h == 0) << "stories260K's hottest head is not layer 0 head 0";
}

TEST(ComparePanel, RunsTheVariantBesideTheCurrentRun) {
  HeadlessImGui imgui(ImVec2(1200, 800));
  std::unique_ptr<RunSession> run = RunSession::open(scenario("minimal.json"), true);
  run->wait();
  AppState state(run->make_source());
  ComparePanel panel;
  state.compare_variant.block_size = 4;
  state.compare_variant_version = 5;
  run_checked_frame(
      [&] {
        ImGui::Begin("cmp");
        panel.draw(state);
        ImGui::End();
      },
      "compare");
  ASSERT_NE(panel.variant(), nullptr);
  panel.variant()->wait();
  EXPECT_EQ(panel.variant()->timeline()->header().block_size, 4);
  EXPECT_EQ(panel.variant()->run_info()->config.num_blocks, run->run_info()->config.num_blocks);
  EXPECT_GT(panel.variant()->timeline()->num_steps(), 10);
}

// The Text tab on the real model: both runs' texts drawn side by side, a 2-bit cache's answers
// told apart from the run's, no ImGui error; the variant's text is coloured from the first token
// that differs (the panel draws it in the warning colour: checked through the draw list).
TEST(ComparePanel, TextTabSetsBothRunsTextsSideBySide) {
  HeadlessImGui imgui(ImVec2(1200, 800));
  std::unique_ptr<RunSession> run = RunSession::open(scenario("minimal.json"));
  run->wait();
  AppState state(run->make_source());
  state.set_step(state.num_steps() - 1);
  ComparePanel panel;
  state.compare_variant.k_format = parse_kv_format("int2-g8", "test");
  state.compare_variant.v_format = parse_kv_format("int2-g8", "test");
  state.compare_variant_version = 1;
  const auto draw = [&](const char* what) {
    run_checked_frame(
        [&] {
          ImGui::Begin("cmp");
          panel.draw(state);
          ImGui::End();
        },
        what);
  };
  draw("compare: the variant starts");
  ASSERT_NE(panel.variant(), nullptr);
  panel.variant()->wait();
  state.compare_tab = 1;  // as a caption's "compare_tab": "text" sets it
  draw("compare: text tab selected");
  draw("compare: text tab");
  ImGuiWindow* cmp = ImGui::FindWindowByName("cmp");
  ASSERT_NE(cmp, nullptr);
  const ImU32 warn = palette(false).warn;
  int warn_vertices = 0;
  for (ImGuiWindow* w : ImGui::GetCurrentContext()->Windows) {  // the table scrolls in a child
    if (w->RootWindow != cmp) continue;
    for (const ImDrawVert& v : w->DrawList->VtxBuffer) warn_vertices += v.col == warn ? 1 : 0;
  }
  EXPECT_GT(warn_vertices, 0) << "a 2-bit cache changes some story, and its text is marked";
}

TEST(QualitySweepCsv, LoadsWhatKvscopeEvalWritesAndNamesBadLines) {
  const auto dir = std::filesystem::temp_directory_path() / "kvscope_ui_panels_test";
  std::filesystem::create_directories(dir);
  const std::string good = (dir / "good.csv").string();
  {
    std::ofstream f(good);
    f << "variant,bytes_per_token,bytes_per_sequence,effective_bytes_per_token,ppl_reference,"
         "ppl_variant,ppl_delta,kl_mean,kl_max,top1_agreement\n"
         "fp32,1280,0,1280,5.5,5.5,0,0,0,1\n"
         "int8,340,0,340,5.5,5.52,0.02,0.001,0.01,0.99\n";
  }
  const QualitySweep s = load_sweep_csv(good);
  ASSERT_EQ(s.points.size(), 2u);
  EXPECT_EQ(s.points[1].label, "int8");
  EXPECT_DOUBLE_EQ(s.points[1].report.kl_mean, 0.001);
  EXPECT_DOUBLE_EQ(s.points[1].report.ppl_variant, 5.52);
  const std::string bad = (dir / "bad.csv").string();
  {
    std::ofstream f(bad);
    f << "variant,bytes_per_token,bytes_per_sequence,effective_bytes_per_token,ppl_reference,"
         "ppl_variant,ppl_delta,kl_mean,kl_max,top1_agreement\n"
         "int8,340,0,340,5.5,5.52,0.02,lots,0.01,0.99\n";
  }
  try {
    load_sweep_csv(bad);
    FAIL() << "a non-number must be refused";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("bad.csv: line 2: kl_mean"), std::string::npos) << what;
    EXPECT_NE(what.find("lots"), std::string::npos) << what;
  }
  EXPECT_THROW(load_sweep_csv((dir / "missing.csv").string()), Error);
}

}  // namespace
}  // namespace kvscope::ui

namespace kvscope::ui {
namespace {

// Presenter captions: the scenario's captions reach the UI, and PageDown walks the run to each
// caption's step in order.
TEST(PresenterCaptions, PageDownJumpsToEachCaptionStep) {
  const std::string path = scenario("shared-system-prompt.json");
  const Scenario parsed = parse_scenario(path);
  ASSERT_GE(parsed.captions.size(), 2u);
  HeadlessImGui imgui(ImVec2(1200, 800));
  UiShell shell(RunSession::open(path, true), imgui.fonts());
  ASSERT_NE(shell.session()->run_info(), nullptr);
  const std::vector<Caption>& captions = shell.session()->run_info()->captions;
  ASSERT_EQ(captions.size(), parsed.captions.size());
  for (std::size_t i = 0; i < captions.size(); ++i) {
    EXPECT_EQ(captions[i].step, parsed.captions[i].step);
    EXPECT_EQ(captions[i].text, parsed.captions[i].text);
  }
  while (shell.session()->is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  run_checked_frame([&] { shell.frame(1.0 / 60.0); }, "first frame");
  shell.state().set_step(0);
  ImGuiIO& io = ImGui::GetIO();
  constexpr int kPageDown =
      300;  // any free slot of io.KeysDown: the headless context has no keymap
  io.KeyMap[ImGuiKey_PageDown] = kPageDown;
  for (const Caption& c : captions) {
    if (c.step == 0 && shell.state().step() == 0) continue;  // already there
    io.KeysDown[kPageDown] = true;
    run_checked_frame([&] { shell.frame(1.0 / 60.0); }, "PageDown");
    io.KeysDown[kPageDown] = false;
    run_checked_frame([&] { shell.frame(1.0 / 60.0); }, "key up");
    EXPECT_EQ(shell.state().step(), c.step) << c.text;
  }
}

// open() returns before the new run's first step: the current run stays shown, the status line
// says what is computing, and a later frame shows the new run. A run replaced before its first
// step is let go without waiting for it (a SmolLM2 prefill would stop the window).
TEST(UiShellOpen, ShowsTheNewRunOnceItsFirstStepIsThere) {
  HeadlessImGui imgui(ImVec2(1200, 800));
  UiShell shell(RunSession::open(scenario("minimal.json"), true), imgui.fonts());
  shell.set_workspace(1);  // Prefix: no background model jobs
  const auto frame = [&](const char* what) {
    run_checked_frame([&] { shell.frame(1.0 / 60.0); }, what);
  };
  frame("first frame");
  const RunSession* before = shell.session();
  // SmolLM2's chat: its first step is six ChatML prompts' prefill (tenths of a second here).
  ASSERT_TRUE(shell.open(scenario("smollm2-chat.json"))) << shell.error_text();
  EXPECT_TRUE(shell.opening());
  EXPECT_EQ(shell.session(), before) << "the current run stays shown";
  frame("opening");
  if (shell.opening()) {
    EXPECT_NE(shell.status().find("opening smollm2-chat.json: computing its first step"),
              std::string::npos)
        << shell.status();
  }
  // Replaced before its first step: the next run is the one shown.
  ASSERT_TRUE(shell.open(scenario("shared-system-prompt.json"))) << shell.error_text();
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (shell.opening() && std::chrono::steady_clock::now() < until) {
    frame("waiting for the first step");
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  ASSERT_FALSE(shell.opening());
  ASSERT_NE(shell.session(), before);
  EXPECT_EQ(std::filesystem::path(shell.session()->path()).filename(), "shared-system-prompt.json");
  EXPECT_TRUE(shell.session()->has_step());
  EXPECT_EQ(shell.status(), "opened " + scenario("shared-system-prompt.json"));
  EXPECT_TRUE(shell.error_text().empty()) << shell.error_text();
  frame("the new run");
}

// File > Open of an eval sweep CSV: merged into the Quality panel, whose workspace is shown; a
// bad one is a modal naming the line and column, with the run kept.
TEST(UiShellOpen, ASweepCsvGoesIntoTheQualityPanel) {
  const auto dir = std::filesystem::path(testing::TempDir()) /
                   ("kvscope-open-csv-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string header =
      "variant,bytes_per_token,bytes_per_sequence,effective_bytes_per_token,ppl_reference,"
      "ppl_variant,ppl_delta,kl_mean,kl_max,top1_agreement\n";
  const std::string good = (dir / "quant_sweep.csv").string();
  const std::string bad = (dir / "bad_sweep.csv").string();
  std::ofstream(good) << header << "fp32,1280,0,1280,5.5,5.5,0,0,0,1\n"
                      << "int8,340,0,340,5.5,5.52,0.02,0.001,0.01,0.99\n";
  std::ofstream(bad) << header << "int8,340,0,340,5.5,5.52,0.02,lots,0.01,0.99\n";
  HeadlessImGui imgui(ImVec2(1280, 720));
  UiShell shell(RunSession::open(scenario("minimal.json"), true), imgui.fonts());
  shell.set_workspace(0);
  run_checked_frame([&] { shell.frame(1.0 / 60.0); }, "first frame");
  const RunSession* run = shell.session();
  QualityPanel* quality = nullptr;
  for (auto& p : shell.panels())
    if (auto* q = dynamic_cast<QualityPanel*>(p.get())) quality = q;
  ASSERT_NE(quality, nullptr);
  ASSERT_TRUE(shell.open(good)) << shell.error_text();
  EXPECT_FALSE(shell.opening()) << "a CSV is not a run";
  EXPECT_EQ(shell.session(), run) << "the run stays";
  EXPECT_EQ(shell.workspace(), UiShell::workspace_of_key("attention"));
  ASSERT_NE(quality->sweep(), nullptr);
  std::vector<std::string> labels;
  for (const QualityPoint& p : quality->sweep()->points) labels.push_back(p.label);
  EXPECT_NE(std::find(labels.begin(), labels.end(), "int8"), labels.end());
  for (int f = 0; f < 3; ++f) run_checked_frame([&] { shell.frame(1.0 / 60.0); }, "the sweep");
  EXPECT_FALSE(shell.open(bad));
  EXPECT_NE(shell.error_text().find("bad_sweep.csv: line 2: kl_mean"), std::string::npos)
      << shell.error_text();
  EXPECT_EQ(shell.session(), run);
  std::filesystem::remove_all(dir);
}

// Ctrl+<key> on minimal.json: the path popup opens on `file` (relative to the working
// directory), nothing is written before Enter, and Enter writes it there; `check` reads it back
// (the browser build downloads the file instead: tests/web/web_test.py).
void write_through_shortcut(
    char key, const char* file,
    const std::function<void(const std::filesystem::path&, const RunSession&)>& check) {
  const std::string path = std::string(KVSCOPE_SOURCE_DIR) + "/scenarios/minimal.json";
  const std::filesystem::path dir =
      std::filesystem::path(testing::TempDir()) /
      ("kvscope-ctrl-" + std::string(1, key) + "-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::filesystem::path old_cwd = std::filesystem::current_path();
  std::filesystem::current_path(dir);  // the popup's default is relative to it
  {
    HeadlessImGui imgui(ImVec2(1200, 800));
    UiShell shell(RunSession::open(path, true), imgui.fonts());
    while (shell.session()->is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    const auto frame = [&](const char* what) {
      run_checked_frame([&] { shell.frame(1.0 / 60.0); }, what);
    };
    frame("first frame");
    ImGuiIO& io = ImGui::GetIO();
    constexpr int kEnter = 301;  // a free slot of io.KeysDown: the headless context has no keymap
    io.KeyMap[ImGuiKey_Enter] = kEnter;
    io.KeyCtrl = true;
    io.KeysDown[static_cast<unsigned char>(key)] = true;  // GLFW key codes are ASCII
    frame("the shortcut");
    io.KeysDown[static_cast<unsigned char>(key)] = false;
    io.KeyCtrl = false;
    for (int i = 0; i < 3; ++i) frame("the popup, its input focused");
    EXPECT_FALSE(std::filesystem::exists(dir / file)) << "written before Enter";
    io.KeysDown[kEnter] = true;
    frame("Enter");
    io.KeysDown[kEnter] = false;
    frame("key up");
    ASSERT_TRUE(std::filesystem::exists(dir / file)) << file;
    check(dir / file, *shell.session());
  }
  std::filesystem::current_path(old_cwd);
  std::filesystem::remove_all(dir);
}

// Ctrl+S: the path popup opens on "<scenario stem>.kvr", and Enter saves the run's recording.
TEST(FileShortcuts, CtrlSAsksWhereAndSavesTheRecording) {
  write_through_shortcut(
      'S', "minimal.kvr", [](const std::filesystem::path& f, const RunSession& run) {
        EXPECT_EQ(Timeline::load(f.string()).num_steps(), run.timeline()->num_steps());
      });
}

// Ctrl+E: the popup opens on "<scenario stem>-metrics.csv", and Enter writes one row per step.
TEST(FileShortcuts, CtrlEAsksWhereAndExportsTheMetrics) {
  write_through_shortcut('E', "minimal-metrics.csv",
                         [](const std::filesystem::path& f, const RunSession& run) {
                           std::ifstream in(f);
                           std::string line;
                           ASSERT_TRUE(std::getline(in, line));
                           EXPECT_EQ(line.rfind("step,blocks_total,", 0), 0u) << line;
                           int rows = 0;
                           while (std::getline(in, line)) {
                             EXPECT_EQ(line.rfind(std::to_string(rows) + ",", 0), 0u)
                                 << "row " << rows << ": " << line;
                             ++rows;
                           }
                           EXPECT_EQ(rows, run.timeline()->num_steps());
                         });
}

}  // namespace
}  // namespace kvscope::ui

namespace kvscope::ui {
namespace {

// A scenario's own compare variants are policies the UI can run: the variant's cache settings
// replace the base's, and an unknown name is a one-line error naming the known ones.
TEST(PolicyOverride, ScenarioVariantsAreRunnable) {
  const std::string path = scenario("naive-vs-paged.json");
  std::unique_ptr<RunSession> base = RunSession::open(path, true);
  ASSERT_NE(base->run_info(), nullptr);
  ASSERT_GE(base->run_info()->variants.size(), 2u);
  EXPECT_EQ(base->run_info()->variants[0], "base");
  EXPECT_EQ(base->run_info()->config.allocator, AllocatorKind::kContiguous);
  PolicyOverride o;
  o.variant = "paged";
  std::unique_ptr<RunSession> paged = RunSession::open(path, true, o);
  EXPECT_EQ(paged->run_info()->config.allocator, AllocatorKind::kPaged);
  EXPECT_EQ(paged->run_info()->scenario_config.allocator, AllocatorKind::kContiguous);
  EXPECT_NE(o.describe().find("variant paged"), std::string::npos);
  o.variant = "pagd";
  try {
    RunSession::open(path, true, o);
    FAIL() << "an unknown variant must be an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("paged"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace kvscope::ui

namespace kvscope::ui {
namespace {

// One frame of `panel` alone in a 1280x800 window; the vertices it drew.
int draw_memory_frame(MemoryPanel& panel, AppState& state, const std::string& what) {
  int vertices = 0;
  run_checked_frame(
      [&] {
        ImGui::SetNextWindowPos(ImVec2(0, 0));
        ImGui::SetNextWindowSize(ImVec2(1280, 800));
        ImGui::Begin("memory");
        panel.draw(state);
        vertices = ImGui::GetWindowDrawList()->VtxBuffer.Size;
        ImGui::End();
      },
      what);
  return vertices;
}

// The ring combo (ring attention): each line becomes one device's share (Llama-3-70B fp16 at 1M
// tokens: 320 GiB on one device, 40 GiB on each of 8), only the full-attention shapes are drawn
// (a window, an SSM state or a hybrid's does not split by position this way), and the loaded
// run's line is split the same way.
TEST(MemoryPanel, ARingShowsOneDevicesShareOfTheSequence) {
  HeadlessImGui imgui(ImVec2(1280, 800));
  std::unique_ptr<RunSession> run = RunSession::open(scenario("minimal.json"));
  run->wait();
  AppState state(run->make_source());
  MemoryPanel panel;
  const auto frame = [&](const std::string& what) { draw_memory_frame(panel, state, what); };
  const auto at_1m = [](const std::vector<PlotSeries>& lines, const std::string& label) {
    for (const PlotSeries& l : lines)
      if (l.label == label) return l.y.back();
    return -1.0;
  };
  const std::vector<PlotSeries> one = panel.formula_series(state, false);
  panel.set_ring(8);
  const std::vector<PlotSeries> ring = panel.formula_series(state, false);
  EXPECT_EQ(at_1m(one, "Llama-3-70B"), 320.0 * 1024 * 1024 * 1024);
  EXPECT_EQ(at_1m(ring, "Llama-3-70B"), 40.0 * 1024 * 1024 * 1024);
  EXPECT_EQ(at_1m(ring, one.back().label), at_1m(one, one.back().label) / 8);  // the loaded run
  for (const PlotSeries& l : ring) {
    EXPECT_EQ(l.label.find("Mamba"), std::string::npos) << l.label;
    EXPECT_EQ(l.label.find("Jamba"), std::string::npos) << l.label;
    EXPECT_EQ(l.label.find("window"), std::string::npos) << l.label;
  }
  EXPECT_LT(ring.size(), one.size());
  frame("a ring of 8");
  EXPECT_NE(panel.shown_text(state, 1, 0).find("a ring of 8 devices"), std::string::npos);
  // The table's ring column: Llama-3-70B's 128K tokens over 8 devices, chunks of 16,384 tokens;
  // a step passes one layer of a chunk (16,384 x 2 x 8 x 128 x 2 bytes = 64 MiB), which an H100
  // attending 16,384 queries to 16,384 keys (8.9 ms) hides easily over NVLink 4 (0.15 ms).
  for (const KvShape& s : published_kv_shapes()) {
    if (s.name == "Llama-3-70B") {
      EXPECT_EQ(panel.ring_step_text(s, s.bytes_per_token(2.0)), "64.0 MiB, hidden");
    }
    if (s.name == "Jamba (1 attn layer in 8)") {
      EXPECT_EQ(panel.ring_step_text(s, 1.0), "-");  // no preset heads: formulas only
    }
  }
  panel.set_ring(1);
  EXPECT_EQ(panel.ring_step_text(published_kv_shapes().front(), 1.0), "-");
}

// The Memory panel's Measure button on a real run (stories260K, fp32 K/V in minimal.json): the
// job measures 128, 256 and 512 tokens, the allocator's bytes equal the formula at those block
// multiples, the OS backs at least them, and the panel plots the points (its axes widened down to
// stories260K's kilobytes). A run without a model offers no button; cancel drops the job.
TEST(MemoryPanel, MeasuresTheRunsModelAndPlotsTheAllocatorAndOsPoints) {
  EXPECT_EQ(memory_job_contexts(512), (std::vector<int>{128, 256, 512}));
  EXPECT_EQ(memory_job_contexts(8192), (std::vector<int>{1024, 2048}));
  EXPECT_EQ(memory_job_contexts(2048), (std::vector<int>{512, 1024, 2048}));
  HeadlessImGui imgui(ImVec2(1280, 800));
  std::unique_ptr<RunSession> run = RunSession::open(scenario("minimal.json"));
  run->wait();
  AppState state(run->make_source());
  MemoryPanel panel;
  const auto frame = [&](const std::string& what) { return draw_memory_frame(panel, state, what); };
  const int before = frame("before measuring");
  panel.start_measurement(state);
  EXPECT_TRUE(panel.busy() || panel.measured() != nullptr);
  frame("while measuring");
  panel.wait_for_measurement();
  frame("the result is taken");
  const int after = frame("measured points drawn");
  ASSERT_NE(panel.measured(), nullptr);
  const MemoryMeasurement& m = *panel.measured();
  ASSERT_TRUE(m.error.empty()) << m.error;
  ASSERT_EQ(m.points.size(), 3u);
  const std::shared_ptr<const RunInfo> info = run->run_info();
  EXPECT_EQ(m.format, info->config.k_format.name());
  for (const KvMemoryPoint& p : m.points) {
    EXPECT_DOUBLE_EQ(p.allocated_bytes, p.formula_bytes) << p.tokens;  // fp32: no scales
    EXPECT_GE(static_cast<double>(p.resident_bytes), p.allocated_bytes - 4096.0) << p.tokens;
  }
  // The points are plotted (one series per source, a point per measured context, markers that
  // stand out) and the footer says they are measurements, not formulas only.
  EXPECT_GT(after, 0);
  EXPECT_GT(before, 0);
  const std::vector<PlotSeries> series = panel.measured_series(state);
  ASSERT_EQ(series.size(), 2u);  // the allocator's bytes and the OS's resident pages
  for (const PlotSeries& s : series) EXPECT_EQ(s.x.size(), 3u) << s.label;
  const std::string footer = panel.shown_text(state, 1, 0);
  EXPECT_NE(footer.find("measured"), std::string::npos) << footer;

  // A panel closed mid-measurement cancels and joins its job (no hang, no use after free under
  // the sanitizers).
  {
    MemoryPanel closing;
    closing.start_measurement(state);
    EXPECT_TRUE(closing.busy());
  }
}

}  // namespace
}  // namespace kvscope::ui
