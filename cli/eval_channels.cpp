// kvscope eval key-channels: see eval_channels.h.
#include "cli/eval_channels.h"

#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <ostream>

#include "cli/format.h"
#include "cli/progress.h"
#include "engine/analysis/kv_channels.h"
#include "engine/common/atomic_write.h"
#include "engine/common/error.h"
#include "engine/infer/step_runner.h"
#include "engine/infer/transformer.h"
#include "engine/kv/cache_manager.h"
#include "engine/report/png_plot.h"

namespace kvscope::cli {

namespace {

// Runs every window through the model, the recording backend filling stats; returns the tokens run.
long collect_channel_stats(Transformer& t, const ModelConfig& c,
                           const std::vector<std::vector<int>>& windows) {
  long done = 0, total = 0;
  for (const auto& w : windows) total += static_cast<long>(w.size());
  {
    Progress bar("eval key-channels", 1, "tokens");
    bar.step("K/V channel statistics");
    for (const auto& w : windows) {
      SoloSequence seq(kv_layout_for(c, 16, 1, KvFormat{}, KvFormat{}), static_cast<int>(w.size()));
      for (int token : w) {
        seq.step(t, token);
        bar(++done, total);
      }
    }
  }
  return total;
}

// The layer whose keys stand out most.
int most_outlying_layer(const KvChannelStats& stats, int n_layers) {
  int shown = 0;
  for (int l = 1; l < n_layers; ++l)
    if (stats.outlier_ratio(KvKind::kKey, l) > stats.outlier_ratio(KvKind::kKey, shown)) shown = l;
  return shown;
}

std::string channel_name(int ch, int hd) {
  std::string name = "h";
  name.append(std::to_string(ch / hd)).append(".").append(std::to_string(ch % hd));
  return name;
}

// Every layer x kind x channel.
void write_channels_csv(const std::string& path, const KvChannelStats& stats,
                        const ModelConfig& c) {
  const int hd = c.head_dim();
  write_file_atomically(path, [&](std::ostream& out) {
    out << "layer,kind,channel,kv_head,dim,mean_abs,max_abs,tokens\n";
    for (int l = 0; l < c.n_layers; ++l)
      for (KvKind kind : {KvKind::kKey, KvKind::kValue})
        for (int ch = 0; ch < stats.channels(); ++ch)
          out << l << "," << (kind == KvKind::kKey ? "K" : "V") << "," << ch << "," << ch / hd
              << "," << ch % hd << "," << stats.mean_abs(kind, l, ch) << ","
              << stats.max_abs(kind, l, ch) << "," << stats.tokens(l) << "\n";
  });
}

void write_channels_png(const std::string& path, const KvChannelStats& stats, int shown,
                        const std::string& model_source, const std::string& source) {
  PlotSpec p;
  p.title = "Layer " + std::to_string(shown) + ": mean |x| per K/V channel";
  p.x_label = "channel (kv_head * head_dim + dim)";
  p.y_label = "mean |x| over " + std::to_string(stats.tokens(shown)) + " tokens";
  for (KvKind kind : {KvKind::kKey, KvKind::kValue}) {
    PlotSeries s;
    s.label = kind == KvKind::kKey ? "keys" : "values";
    s.markers = true;
    for (int ch = 0; ch < stats.channels(); ++ch) {
      s.x.push_back(ch);
      s.y.push_back(stats.mean_abs(kind, shown, ch));
    }
    p.series.push_back(std::move(s));
  }
  p.footnote = std::filesystem::path(model_source).filename().string() + ", " +
               std::filesystem::path(source).filename().string() +
               "; keys after RoPE, as cached (kvscope eval key-channels)";
  write_png_plot(p, path);
}

void print_channels_json(const KvChannelStats& stats, int n_layers, const std::string& source,
                         int shown) {
  nlohmann::json layers = nlohmann::json::array();
  for (int l = 0; l < n_layers; ++l) {
    nlohmann::json top = nlohmann::json::array();
    for (int ch : stats.top_channels(KvKind::kKey, l, 3)) top.push_back(ch);
    layers.push_back({{"layer", l},
                      {"key_outlier_ratio", stats.outlier_ratio(KvKind::kKey, l)},
                      {"value_outlier_ratio", stats.outlier_ratio(KvKind::kValue, l)},
                      {"top_key_channels", top}});
  }
  std::printf("%s\n", nlohmann::json{{"source", source},
                                     {"tokens", stats.tokens(0)},
                                     {"plotted_layer", shown},
                                     {"layers", layers}}
                          .dump(2)
                          .c_str());
}

void print_channels_table(const KvChannelStats& stats, const ModelConfig& c,
                          const std::string& source, long total, int shown,
                          const std::string& out_dir) {
  const int hd = c.head_dim();
  std::printf("K/V channel magnitude: %s, %ld tokens, %d layers x %d channels (%d KV heads x %d)\n",
              source.c_str(), total, c.n_layers, stats.channels(), c.n_kv_heads, hd);
  std::printf("outlier ratio = mean |x| of the largest channel / median channel\n\n");
  std::printf("| layer | keys | values | top key channels (mean |k|) |\n|---:|---:|---:|---|\n");
  double key_sum = 0.0, value_sum = 0.0;
  for (int l = 0; l < c.n_layers; ++l) {
    std::string top;
    for (int ch : stats.top_channels(KvKind::kKey, l, 3)) {
      char buf[64];
      std::snprintf(buf, sizeof buf, "%s%s (%.2f)", top.empty() ? "" : ", ",
                    channel_name(ch, hd).c_str(), stats.mean_abs(KvKind::kKey, l, ch));
      top += buf;
    }
    const double rk = stats.outlier_ratio(KvKind::kKey, l);
    const double rv = stats.outlier_ratio(KvKind::kValue, l);
    key_sum += rk;
    value_sum += rv;
    std::printf("| %d | %.1f | %.1f | %s |\n", l, rk, rv, top.c_str());
  }
  std::printf("\nmean over layers: keys %.1f, values %.1f\n", key_sum / c.n_layers,
              value_sum / c.n_layers);
  std::printf("wrote %s/key_channels.csv, key_channels.png (layer %d)\n", out_dir.c_str(), shown);
}

}  // namespace

int run_key_channels(std::shared_ptr<const Model> model, Backend& backend,
                     const std::vector<std::vector<int>>& windows, const std::string& source,
                     int layer, const std::string& out_dir, bool json) {
  const ModelConfig& c = model->config();
  if (layer >= c.n_layers) {
    fail_expected("--layer", "a layer in [0, " + std::to_string(c.n_layers - 1) + "]",
                  std::to_string(layer));
  }
  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  if (ec) throw Error(out_dir, "cannot create the output directory: " + ec.message());
  KvChannelStats stats(c.n_layers, c.n_kv_heads, c.head_dim());
  const std::unique_ptr<Backend> recording = make_channel_stats_backend(backend, stats);
  Transformer t(model, *recording);
  const long total = collect_channel_stats(t, c, windows);
  const int shown = layer >= 0 ? layer : most_outlying_layer(stats, c.n_layers);
  write_channels_csv(out_dir + "/key_channels.csv", stats, c);
  write_channels_png(out_dir + "/key_channels.png", stats, shown, model->source(), source);

  if (json) {
    print_channels_json(stats, c.n_layers, source, shown);
  } else {
    print_channels_table(stats, c, source, total, shown, out_dir);
  }
  return 0;
}

}  // namespace kvscope::cli
