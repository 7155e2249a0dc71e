// QualityJob: the background sweep and the CSV loader.
#include "app/core/quality_job.h"

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "engine/backend/backend.h"
#include "engine/common/error.h"
#include "engine/kv/kv_format.h"
#include "engine/model/transformer.h"

namespace kvscope::ui {

namespace {

struct Cancelled {};

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path, "cannot open the eval text");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

std::vector<std::pair<std::string, std::string>> sweep_formats() {
  return {{"fp32", "fp32"},         {"fp16", "fp16"},         {"bf16", "bf16"},
          {"fp8-e4m3", "fp8-e4m3"}, {"fp8-e5m2", "fp8-e5m2"}, {"int8", "int8"},
          {"int8", "int4"},         {"int4", "int4"},         {"int4-g8", "int4-g8"},
          {"kivi4", "kivi4"},       {"kivi2", "kivi2"},       {"int2", "int2"},
          {"int2-g8", "int2-g8"}};
}

QualitySweep load_sweep_csv(const std::string& path) {
  QualitySweep s;
  s.model = path;
  s.source = "loaded from " + path;
  s.from_csv = true;
  std::ifstream in(path);
  if (!in) throw Error(path, "cannot open the sweep CSV");
  std::string line;
  if (!std::getline(in, line) || line.rfind("variant,bytes_per_token,", 0) != 0)
    throw Error(path + ": line 1",
                "expected the header of `kvscope eval --sweep` (variant,"
                "bytes_per_token,...), got \"" +
                    line.substr(0, 40) + "\"");
  constexpr const char* kCols[] = {"bytes_per_token",
                                   "bytes_per_sequence",
                                   "effective_bytes_per_token",
                                   "ppl_reference",
                                   "ppl_variant",
                                   "ppl_delta",
                                   "kl_mean",
                                   "kl_max",
                                   "top1_agreement"};
  for (int ln = 2; std::getline(in, line); ++ln) {
    if (line.empty()) continue;
    std::vector<std::string> f;
    std::stringstream ss(line);
    for (std::string cell; std::getline(ss, cell, ',');) f.push_back(cell);
    if (f.size() != 10)
      throw Error(path + ": line " + std::to_string(ln),
                  "expected 10 comma-separated fields, got " + std::to_string(f.size()));
    double v[9];
    for (int i = 0; i < 9; ++i) {
      const std::string& cell = f[static_cast<std::size_t>(i) + 1];
      char* end = nullptr;
      v[i] = std::strtod(cell.c_str(), &end);
      if (cell.empty() || *end != '\0' || !std::isfinite(v[i]))
        throw Error(path + ": line " + std::to_string(ln) + ": " + kCols[i],
                    "expected a number, got \"" + cell + "\"");
    }
    QualityReport r;
    r.variant = f[0];
    r.footprint.bytes_per_token = v[0];
    r.footprint.bytes_per_sequence = v[1];
    r.effective_bytes_per_token = v[2];
    r.ppl_reference = v[3];
    r.ppl_variant = v[4];
    r.kl_mean = v[6];
    r.kl_max = v[7];
    r.top1_agreement = v[8];
    s.reports.push_back(r);
  }
  if (s.reports.empty()) throw Error(path, "expected at least one format row, got none");
  return s;
}

QualityJob::~QualityJob() {
  cancel();
}

void QualityJob::cancel() {
  cancel_ = true;
  if (worker_.joinable()) worker_.join();
  cancel_ = false;
  busy_ = false;
}

void QualityJob::start(std::shared_ptr<const Model> model,
                       std::shared_ptr<const Tokenizer> tokenizer, std::string text_path,
                       long max_tokens, int block_size) {
  if (busy_.load()) return;
  if (worker_.joinable()) worker_.join();
  busy_ = true;
  formats_done_ = 0;
  fraction_ = 0.0f;
  worker_ = std::thread([this, model = std::move(model), tokenizer = std::move(tokenizer),
                         text_path = std::move(text_path), max_tokens, block_size] {
    auto sweep = std::make_shared<QualitySweep>();
    sweep->model = model ? model->source() : std::string();
    sweep->block_size = block_size;
    const auto progress = [this](long done, long total) {
      if (cancel_.load()) throw Cancelled{};
      fraction_ = total > 0 ? static_cast<float>(done) / static_cast<float>(total) : 0.0f;
    };
    try {
      if (!model || !tokenizer) throw Error("quality", "no model with a tokenizer is loaded");
      if (model->is_random_weights())
        throw Error(model->source(), "random weights: no quality figure is meaningful");
      std::vector<std::vector<int>> all =
          text_windows(*tokenizer, read_text(text_path), model->config().seq_len, text_path);
      std::vector<std::vector<int>> windows;
      long tokens = 0;
      for (auto& w : all) {
        if (tokens >= max_tokens) break;
        tokens += static_cast<long>(w.size());
        windows.push_back(std::move(w));
      }
      auto backend = make_cpu_backend(1);
      Transformer transformer(model, *backend);
      QualityEvaluator evaluator(transformer, std::move(windows), block_size, progress);
      formats_done_ = 1;
      sweep->source = text_path;
      sweep->windows = static_cast<int>(evaluator.windows().size());
      sweep->positions = evaluator.num_positions();
      for (const auto& [k, v] : sweep_formats()) {
        auto variant = make_kv_format_variant(parse_kv_format(k, "sweep"),
                                              parse_kv_format(v, "sweep"), block_size);
        sweep->reports.push_back(evaluator.evaluate(*variant, progress));
        ++formats_done_;
      }
    } catch (const Cancelled&) {
      busy_ = false;
      return;
    } catch (const std::exception& e) {
      sweep->reports.clear();
      sweep->error = e.what();
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      done_ = std::move(sweep);
    }
    busy_ = false;
  });
}

std::shared_ptr<QualitySweep> QualityJob::take() {
  std::lock_guard<std::mutex> lock(mutex_);
  return std::move(done_);
}

}  // namespace kvscope::ui
