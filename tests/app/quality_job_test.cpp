// The quality-vs-memory sweep behind the Quality panel: the background job's KV format, MLA and
// eviction points on the real model (stories260K), the eviction memory axis checked against runs
// of one window at a time, and the loader for the three sweep CSVs (good files, merging, bad ones).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <optional>

#include "app/core/headless.h"
#include "app/core/quality_cache.h"
#include "app/core/quality_job.h"
#include "app/core/run_session.h"
#include "app/panels/quality_panel.h"
#include "engine/backend/backend.h"
#include "engine/common/error.h"
#include "engine/model/locate.h"
#include "tests/app/ui_test_support.h"

namespace kvscope::ui {
namespace {

std::string eval_text() {
  return default_eval_text_path();
}

constexpr long kTestTokens = 600;  // whole stories up to at least this many tokens

const LoadedModel& model() {
  static const LoadedModel m = load_model("", "");
  return m;
}

// A fresh disk cache for the sweep run_job computes (and writes there).
std::string job_cache_dir() {
  static const std::string dir = [] {
    const auto d = std::filesystem::temp_directory_path() /
                   ("kvscope_quality_cache_" + std::to_string(::getpid()));
    std::filesystem::remove_all(d);
    return d.string();
  }();
  return dir;
}

std::shared_ptr<QualitySweep> run_job() {
  static std::shared_ptr<QualitySweep> sweep = [] {
    QualityJob job;
    job.start(model().model, model().tokenizer, eval_text(), kTestTokens, 16, job_cache_dir());
    job.wait();
    EXPECT_EQ(job.steps_done(), job.total_steps());
    EXPECT_EQ(job.total_steps(), 1 + sweep_num_variants(model().model->config()));
    std::shared_ptr<QualitySweep> out = job.take();
    // A finished sweep is written to the disk cache under its key.
    const std::string key = sweep_cache_key(model().model->source(), eval_text(), kTestTokens, 16,
                                            sweep_variants_text(model().model->config(), 16));
    const std::string path = sweep_cache_path(job_cache_dir(), key);
    EXPECT_EQ(out->cache_note, "cached in " + path);
    std::string why;
    const std::optional<QualitySweep> back = load_sweep_cache(path, key, &why);
    EXPECT_TRUE(back.has_value()) << why;
    if (back) {
      EXPECT_EQ(back->points.size(), out->points.size());
    }
    std::filesystem::remove_all(job_cache_dir());
    return out;
  }();
  return sweep;
}

std::vector<const QualityPoint*> series(const QualitySweep& s, const std::string& name) {
  std::vector<const QualityPoint*> out;
  for (const QualityPoint& p : s.points)
    if (p.series == name) out.push_back(&p);
  return out;
}

TEST(QualityJob, EvaluatesFormatsMlaRanksAndEvictionBudgetsOnTheRealModel) {
  const std::shared_ptr<QualitySweep> s = run_job();
  ASSERT_NE(s, nullptr);
  ASSERT_TRUE(s->error.empty()) << s->error;
  const ModelConfig& c = model().model->config();
  EXPECT_EQ(s->points.size(), static_cast<std::size_t>(sweep_num_variants(c)));
  const double fp32 = s->reference_bytes_per_token;
  EXPECT_DOUBLE_EQ(fp32, 2.0 * c.n_layers * c.n_kv_heads * c.head_dim() * 4);
  EXPECT_EQ(s->points.front().label, "fp32");
  EXPECT_EQ(s->points.front().report.kl_mean, 0.0);

  // MLA mode A: ranks ascending, bytes = rank * 4 per layer; full rank is exact (KL at rounding
  // level, the fp32 bytes); every rank removed costs more KL.
  const auto mla = series(*s, "MLA-A");
  ASSERT_EQ(mla.size(), sweep_mla_ranks(c).size());
  for (std::size_t i = 0; i < mla.size(); ++i) {
    const int rank = sweep_mla_ranks(c)[i];
    EXPECT_EQ(mla[i]->family, QualityFamily::kMla);
    EXPECT_EQ(mla[i]->label, "r=" + std::to_string(rank));
    EXPECT_DOUBLE_EQ(mla[i]->bytes_per_token, 4.0 * rank * c.n_layers);
    if (i > 0) {
      EXPECT_GT(mla[i - 1]->report.kl_mean, mla[i]->report.kl_mean) << mla[i]->label;
    }
  }
  EXPECT_DOUBLE_EQ(mla.back()->bytes_per_token, fp32);
  EXPECT_LT(mla.back()->report.kl_mean, 1e-6);
  EXPECT_GT(mla.front()->report.kl_mean, 100 * mla.back()->report.kl_mean);

  // Eviction: every window is longer than the budgets, so every point evicts and holds less than
  // the full cache; the window policy loses more at each smaller budget.
  for (const auto& w :
       quality_eval_windows(*model().tokenizer, eval_text(), c.seq_len, kTestTokens))
    ASSERT_GT(w.size(), 128u + 16u);
  const auto window = series(*s, "window");
  ASSERT_EQ(window.size(), 4u);
  for (std::size_t i = 0; i < window.size(); ++i) {
    EXPECT_EQ(window[i]->family, QualityFamily::kEviction);
    EXPECT_LT(window[i]->bytes_per_token, fp32) << window[i]->label;
    EXPECT_GT(window[i]->report.kl_mean, 0.0) << window[i]->label;
    if (i > 0) {
      EXPECT_GT(window[i - 1]->report.kl_mean, window[i]->report.kl_mean) << window[i]->label;
      EXPECT_LT(window[i - 1]->bytes_per_token, window[i]->bytes_per_token) << window[i]->label;
    }
  }
  EXPECT_EQ(window.front()->label, "B=16");
  // H2O with and without compaction: the same predictions, never more memory when compacted.
  const auto h2o = series(*s, "h2o"), packed = series(*s, "h2o compact=always");
  ASSERT_EQ(h2o.size(), 4u);
  ASSERT_EQ(packed.size(), 4u);
  for (std::size_t i = 0; i < h2o.size(); ++i) {
    EXPECT_NEAR(h2o[i]->report.kl_mean, packed[i]->report.kl_mean,
                1e-4 * h2o[i]->report.kl_mean + 1e-9);
    EXPECT_LE(packed[i]->bytes_per_token, h2o[i]->bytes_per_token);
  }

  // The eviction x value is each window's peak block bytes over its tokens: recomputed here from
  // one fresh variant per window (window B=32, h2o B=32).
  const auto windows =
      quality_eval_windows(*model().tokenizer, eval_text(), c.seq_len, kTestTokens);
  auto backend = make_cpu_backend(1);
  Transformer t(model().model, *backend);
  for (const EvictionRunOptions& o : {sweep_evictions(16)[1], sweep_evictions(16)[5]}) {
    double peak_sum = 0.0;
    long tokens = 0;
    for (const auto& w : windows) {
      EvictionVariant alone(o);
      alone.run(t, w, [](int, std::span<const float>) {});
      peak_sum += static_cast<double>(alone.stats().peak_kv_bytes);
      tokens += static_cast<long>(w.size());
    }
    const QualityPoint p = eviction_point({}, o, 0.0);
    const auto it = std::find_if(s->points.begin(), s->points.end(), [&](const QualityPoint& q) {
      return q.series == p.series && q.label == p.label;
    });
    ASSERT_NE(it, s->points.end()) << p.series << " " << p.label;
    EXPECT_DOUBLE_EQ(it->bytes_per_token, peak_sum / static_cast<double>(tokens)) << p.label;
  }
}

// A budget that covers every window evicts nothing: KL exactly 0, and the memory axis shows the
// full cache's whole blocks.
TEST(QualityJob, EvictionBudgetCoveringTheWindowsIsExact) {
  const ModelConfig& c = model().model->config();
  auto windows = quality_eval_windows(*model().tokenizer, eval_text(), c.seq_len, 300);
  std::size_t longest = 0, blocks = 0, tokens = 0;
  for (const auto& w : windows) {
    longest = std::max(longest, w.size());
    blocks += (w.size() + 15) / 16;
    tokens += w.size();
  }
  auto backend = make_cpu_backend(1);
  Transformer t(model().model, *backend);
  QualityEvaluator evaluator(t, std::move(windows), 16);
  for (EvictionRunOptions o : sweep_evictions(16)) {
    o.evictor.policy.budget = static_cast<int>(longest);
    EvictionVariant v(o);
    const QualityReport r = evaluator.evaluate(v);
    EXPECT_EQ(r.kl_mean, 0.0) << v.name();
    EXPECT_EQ(r.ppl_variant, r.ppl_reference) << v.name();
    const QualityPoint p = eviction_point(r, o, v.stats().peak_bytes_per_context_token());
    EXPECT_DOUBLE_EQ(p.bytes_per_token, static_cast<double>(blocks) * 16.0 *
                                            r.reference_bytes_per_token /
                                            static_cast<double>(tokens));
  }
}

std::string write(const std::string& name, const std::string& text) {
  const auto dir = std::filesystem::temp_directory_path() / "kvscope_quality_job_test";
  std::filesystem::create_directories(dir);
  const std::string path = (dir / name).string();
  std::ofstream(path) << text;
  return path;
}

const char* kMlaHeader =
    "variant,kind,rank,rope_dims,energy_kept_mean,energy_kept_min,bytes_per_token,"
    "bytes_per_sequence,effective_bytes_per_token,ppl_reference,ppl_variant,ppl_delta,kl_mean,"
    "kl_max,top1_agreement\n";
const char* kEvictHeader =
    "policy,budget,sinks,compaction,positions,context,ppl_reference,ppl_variant,ppl_delta,"
    "kl_mean,kl_max,top1_agreement,peak_kv_bytes,full_cache_peak_bytes,mean_attended,"
    "tokens_evicted,blocks_freed,slots_moved,peak_bytes_per_context_token\n";

std::string error_of(const std::string& path) {
  try {
    load_sweep_csv(path);
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(QualitySweepCsv, ReadsMlaAndEvictionSweepsAndMergesThem) {
  const std::string quant =
      write("quant_sweep.csv",
            "variant,bytes_per_token,bytes_per_sequence,effective_bytes_per_token,ppl_reference,"
            "ppl_variant,ppl_delta,kl_mean,kl_max,top1_agreement\n"
            "fp32,1280,0,1280,5.5,5.5,0,0,0,1\n"
            "int8,340,0,340,5.5,5.52,0.02,0.001,0.01,0.99\n");
  const std::string mla =
      write("mla_sweep.csv", std::string(kMlaHeader) +
                                 "\"MLA-A r32\",mla-a,32,0,0.9,0.8,640,0,640,5.5,6.5,1.0,0.1,"
                                 "2,0.8\n"
                                 "\"MLA-B r24 rope2 high-freq fp16\",mla-b,24,2,0.7,0.6,280,0,"
                                 "280,5.5,9,3.5,0.5,4,0.6\n"
                                 "\"int8\",format,0,0,1,1,340,0,340,5.5,5.53,0.03,0.002,0.02,"
                                 "0.98\n");
  const std::string evict =
      write("evict_sweep.csv", std::string(kEvictHeader) +
                                   "window,32,4,never,keep,0,4.8,5.4,0.6,0.2,9,0.85,61440,532480,"
                                   "31.5,6000,300,0,150.5\n"
                                   "sinks,64,4,always,shift,256,4.8,5.1,0.3,0.1,8,0.9,81920,532480,"
                                   "60,5000,200,9000,230.25\n");
  QualitySweep s = load_sweep_csv(quant);
  EXPECT_DOUBLE_EQ(s.reference_bytes_per_token, 1280.0);
  merge_sweep(s, load_sweep_csv(mla));
  merge_sweep(s, load_sweep_csv(evict));
  EXPECT_TRUE(s.from_csv);
  EXPECT_EQ(s.loaded, (std::vector<std::string>{quant, mla, evict}));
  std::map<std::string, const QualityPoint*> by;
  for (const QualityPoint& p : s.points) by[p.series + " / " + p.label] = &p;
  ASSERT_EQ(by.size(), s.points.size()) << "series + label are unique after merging";
  ASSERT_EQ(s.points.size(), 6u);
  // int8 appears in both CSVs: the later one replaces it.
  ASSERT_TRUE(by.count("KV formats / int8"));
  EXPECT_DOUBLE_EQ(by["KV formats / int8"]->report.kl_mean, 0.002);
  ASSERT_TRUE(by.count("MLA-A / r=32"));
  EXPECT_EQ(by["MLA-A / r=32"]->family, QualityFamily::kMla);
  EXPECT_DOUBLE_EQ(by["MLA-A / r=32"]->bytes_per_token, 640.0);
  ASSERT_TRUE(by.count("MLA-B rope2 high-freq fp16 / r=24"));
  ASSERT_TRUE(by.count("window / B=32"));
  EXPECT_EQ(by["window / B=32"]->family, QualityFamily::kEviction);
  EXPECT_DOUBLE_EQ(by["window / B=32"]->bytes_per_token, 150.5);
  EXPECT_DOUBLE_EQ(by["window / B=32"]->report.kl_mean, 0.2);
  ASSERT_TRUE(by.count("sinks(4) compact=always positions=shift context=256 / B=64"));
}

TEST(QualitySweepCsv, RefusesBadFilesNamingLineColumnAndValue) {
  std::string what = error_of(write("bad_rank.csv", std::string(kMlaHeader) +
                                                        "\"MLA-A r32\",mla-a,3x,0,0.9,0.8,640,0,"
                                                        "640,5.5,6.5,1.0,0.1,2,0.8\n"));
  EXPECT_NE(what.find("bad_rank.csv: line 2: rank: expected a number, got \"3x\""),
            std::string::npos)
      << what;
  what = error_of(write("bad_kind.csv", std::string(kMlaHeader) +
                                            "\"MLA-C r32\",mla-c,32,0,0.9,0.8,640,0,640,5.5,6.5,"
                                            "1.0,0.1,2,0.8\n"));
  EXPECT_NE(what.find("bad_kind.csv: line 2: kind: expected mla-a, mla-b or format, got \"mla-c\""),
            std::string::npos)
      << what;
  what = error_of(write("bad_policy.csv", std::string(kEvictHeader) +
                                              "lru,32,4,never,keep,0,4.8,5.4,0.6,0.2,9,0.85,61440,"
                                              "532480,31.5,6000,300,0,150.5\n"));
  EXPECT_NE(what.find("bad_policy.csv: line 2: policy: expected an eviction policy"),
            std::string::npos)
      << what;
  what = error_of(write("bad_bytes.csv", std::string(kEvictHeader) +
                                             "window,32,4,never,keep,0,4.8,5.4,0.6,0.2,9,0.85,"
                                             "61440,532480,31.5,6000,300,0,0\n"));
  EXPECT_NE(what.find("line 2: peak_bytes_per_context_token: expected a number > 0, got \"0\""),
            std::string::npos)
      << what;
  // An evict_sweep.csv from before the column existed: the header says what is missing.
  what = error_of(write("old_evict.csv",
                        "policy,budget,sinks,compaction,positions,context,ppl_reference,"
                        "ppl_variant,ppl_delta,kl_mean,kl_max,top1_agreement,peak_kv_bytes,"
                        "full_cache_peak_bytes,mean_attended,tokens_evicted,blocks_freed,"
                        "slots_moved\n"
                        "window,32,4,never,keep,0,4.8,5.4,0.6,0.2,9,0.85,61440,532480,31.5,"
                        "6000,300,0\n"));
  EXPECT_NE(what.find("old_evict.csv: line 1: expected a peak_bytes_per_context_token column"),
            std::string::npos)
      << what;
  what = error_of(write("short.csv", std::string(kEvictHeader) + "window,32,4\n"));
  EXPECT_NE(what.find("short.csv: line 2: expected 19 comma-separated fields, got 3"),
            std::string::npos)
      << what;
  what = error_of(write("other.csv", "a,b,c\n1,2,3\n"));
  EXPECT_NE(what.find("other.csv: line 1: expected the header of `kvscope eval format-sweep`"),
            std::string::npos)
      << what;
  what = error_of(write("empty_rows.csv", std::string(kMlaHeader)));
  EXPECT_NE(what.find("empty_rows.csv: expected at least one data row, got none"),
            std::string::npos)
      << what;
}

// The panel draws the computed sweep merged with an eviction CSV: one series per family with
// labels, hovered all over, for several frames, without ImGui errors, and keeps every point.
// The disk cache, without computing a sweep (the job test above computes one and checks it was
// written): a sweep saved under the key the job derives is what a job on those inputs reads back
// (no step computed, every number equal); another key, a torn file and a missing one are each
// refused with a reason, and an unreadable model file gives no key at all.
TEST(QualitySweepCache, AJobOnTheSameInputsReadsTheSavedSweepBack) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("kvscope_quality_cache_read_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  const std::string key = sweep_cache_key(model().model->source(), eval_text(), kTestTokens, 16,
                                          sweep_variants_text(model().model->config(), 16));
  ASSERT_FALSE(key.empty());
  const std::string path = sweep_cache_path(dir.string(), key);
  QualitySweep saved;
  saved.model = model().model->source();
  saved.source = eval_text();
  saved.positions = 611;
  saved.windows = 2;
  saved.reference_bytes_per_token = 1.0 / 3.0;  // a double that needs every digit
  for (int i = 0; i < 3; ++i) {
    QualityPoint p;
    p.family = static_cast<QualityFamily>(i);
    p.series = i == 0 ? "KV formats" : (i == 1 ? "MLA-A" : "h2o compact=always");
    p.label = "point " + std::to_string(i);
    p.bytes_per_token = 100.0 / (i + 3);
    p.report.kl_mean = 1e-7 * (i + 1) / 7.0;
    p.report.ppl_variant = 19.8 + i / 9.0;
    p.report.ppl_reference = 19.8;
    p.report.top1_agreement = 0.9 - i / 11.0;
    saved.points.push_back(p);
  }
  save_sweep_cache(path, key, saved);

  QualityJob job;
  job.start(model().model, model().tokenizer, eval_text(), kTestTokens, 16, dir.string());
  job.wait();
  const std::shared_ptr<QualitySweep> cached = job.take();
  ASSERT_NE(cached, nullptr);
  EXPECT_TRUE(cached->from_cache);
  EXPECT_EQ(cached->cache_note, "from the disk cache " + path);
  EXPECT_EQ(job.steps_done(), job.total_steps());
  EXPECT_EQ(cached->positions, 611);
  EXPECT_EQ(cached->windows, 2);
  EXPECT_EQ(cached->reference_bytes_per_token, saved.reference_bytes_per_token);
  ASSERT_EQ(cached->points.size(), saved.points.size());
  for (std::size_t i = 0; i < saved.points.size(); ++i) {
    const QualityPoint &a = cached->points[i], &b = saved.points[i];
    EXPECT_EQ(a.family, b.family) << i;
    EXPECT_EQ(a.series + " " + a.label, b.series + " " + b.label) << i;
    EXPECT_EQ(a.bytes_per_token, b.bytes_per_token) << i;
    EXPECT_EQ(a.report.kl_mean, b.report.kl_mean) << i;
    EXPECT_EQ(a.report.ppl_variant, b.report.ppl_variant) << i;
    EXPECT_EQ(a.report.top1_agreement, b.report.top1_agreement) << i;
  }

  std::string why;
  EXPECT_FALSE(load_sweep_cache(path, key + "x", &why));
  EXPECT_EQ(why, path + ": holds another sweep's key");
  const std::string torn = (dir / "torn.json").string();
  std::ofstream(torn) << "{\"key\": \"";
  EXPECT_FALSE(load_sweep_cache(torn, key, &why));
  EXPECT_EQ(why.rfind(torn + ": unreadable (", 0), 0u) << why;
  const std::string none = (dir / "none.json").string();
  EXPECT_FALSE(load_sweep_cache(none, key, &why));
  EXPECT_EQ(why, none + ": not cached yet");
  EXPECT_EQ(sweep_cache_key("/nonexistent/model.bin", eval_text(), kTestTokens, 16, "x"), "");
  EXPECT_NE(sweep_cache_path("d", key), sweep_cache_path("d", key + " "));
  std::filesystem::remove_all(dir);
}

TEST(QualityPanel, DrawsEveryFamilyOfAComputedAndLoadedSweep) {
  const std::shared_ptr<QualitySweep> computed = run_job();
  ASSERT_NE(computed, nullptr);
  auto shown = std::make_shared<QualitySweep>(*computed);
  merge_sweep(*shown, load_sweep_csv(write("evict_panel.csv",
                                           std::string(kEvictHeader) +
                                               "sinks,32,4,never,keep,0,4.8,5.4,0.6,0.2,9,0.85,"
                                               "61440,532480,31.5,6000,300,0,150.5\n")));
  HeadlessImGui imgui(ImVec2(1400, 800));
  std::unique_ptr<RunSession> run = RunSession::open(
      std::string(KVSCOPE_SOURCE_DIR) + "/scenarios/minimal.json", /*bookkeeping=*/true);
  run->wait();
  AppState state(run->make_source());
  QualityPanel panel;
  panel.show(shown);
  ImGuiIO& io = ImGui::GetIO();
  int vertices = 0;
  for (int frame = 0; frame < 40; ++frame) {
    io.MousePos = ImVec2(static_cast<float>((frame * 97) % 1400),
                         static_cast<float>(40 + (frame * 53) % 760));
    state.presenter = frame >= 20;
    vertices = test::draw_panel_alone(panel, state, "quality", ImVec2(1400, 800),
                                      "quality panel, frame " + std::to_string(frame));
  }
  EXPECT_GT(vertices, 2000);
  EXPECT_FALSE(panel.busy()) << "a bookkeeping run has no model: no sweep starts";
  ASSERT_EQ(panel.sweep(), shown.get());
  EXPECT_EQ(panel.sweep()->points.size(), computed->points.size() + 1);
}

}  // namespace
}  // namespace kvscope::ui
