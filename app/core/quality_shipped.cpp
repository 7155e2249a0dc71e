// Shipped quality sweeps: the content key, the files (the disk cache's JSON plus provenance), the
// lookup, and the command-line writer.
#include "app/core/quality_shipped.h"

#include <algorithm>
#include <chrono>
#include <ctime>
#include <filesystem>
#include <memory>
#include <thread>
#include <vector>

#include "app/core/quality_cache.h"
#include "app/core/quality_job.h"
#include "app/core/sha256.h"
#include "engine/analysis/quality.h"
#include "engine/common/error.h"
#include "engine/model/locate.h"

namespace kvscope::ui {

namespace {

// The provenance fields a shipped file must hold besides the disk cache's.
SweepFileNotes note_names() {
  return {{"made_by", ""}, {"date", ""}, {"commit", ""}, {"wall_time", ""}};
}

// `path` relative to the checkout when it is inside it (what a shipped file records: never this
// machine's directories).
std::string checkout_relative(const std::string& path) {
  const std::string root = std::string(KVSCOPE_SOURCE_DIR) + "/";
  return path.rfind(root, 0) == 0 ? path.substr(root.size()) : path;
}

// The first line a command prints ("" when it cannot run).
std::string first_line_of(const std::string& command) {
  std::FILE* p = ::popen(command.c_str(), "r");
  if (p == nullptr) return {};
  char buf[256] = {};
  std::string line = std::fgets(buf, sizeof buf, p) != nullptr ? buf : "";
  ::pclose(p);
  while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.pop_back();
  return line;
}

// HEAD of the checkout, and whether tracked files differ from it (the figures are then those of a
// tree no commit holds, which the file must say).
std::string checkout_commit() {
  const std::string git = "git -C '" + std::string(KVSCOPE_SOURCE_DIR) + "' ";
  std::string head = first_line_of(git + "rev-parse HEAD 2>/dev/null");
  if (head.empty()) return "unknown (not a git checkout)";
  if (!first_line_of(git + "status --porcelain --untracked-files=no 2>/dev/null").empty())
    head += " + uncommitted changes";
  return head;
}

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  ::gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S UTC", &tm);
  return buf;
}

}  // namespace

std::string shipped_sweeps_dir() {
  return std::string(KVSCOPE_SOURCE_DIR) + "/assets/quality";
}

std::string shipped_sweep_key(const std::string& model_path, const std::string& tokenizer_path,
                              const std::string& weight_format, const std::string& text_path,
                              long max_tokens, int block_size, const std::string& variants) {
  const std::string model = sha256_file_hex(model_path);
  // A GGUF's tokenizer is the model file itself: hashed once.
  const std::string tokenizer = tokenizer_path.empty() || tokenizer_path == model_path
                                    ? std::string("in the model file")
                                    : sha256_file_hex(tokenizer_path);
  return "kvscope quality sweep " + std::to_string(kSweepFormatVersion) + "\nmodel sha256 " +
         model + "\ntokenizer sha256 " + tokenizer + "\nweights " + weight_format +
         "\ntext sha256 " + sha256_file_hex(text_path) + "\ntokens " + std::to_string(max_tokens) +
         "\nblock " + std::to_string(block_size) + "\nvariants " + variants + "\n";
}

std::string shipped_sweep_key(const Model& model, const Tokenizer& tokenizer,
                              const std::string& text_path, long max_tokens, int block_size) {
  return shipped_sweep_key(model.source(), tokenizer.path(),
                           weight_format_name(model.weight_format()), text_path, max_tokens,
                           block_size, sweep_variants_text(model.config(), block_size));
}

std::optional<ShippedSweep> load_shipped_sweep(const std::string& path, const std::string& key,
                                               std::string* why) {
  SweepFileNotes notes = note_names();
  std::optional<QualitySweep> sweep = load_sweep_cache(path, key, why, &notes);
  if (!sweep) return std::nullopt;
  ShippedSweep s;
  s.file = path;
  s.made_by = notes["made_by"];
  s.date = notes["date"];
  s.commit = notes["commit"];
  s.wall_time = notes["wall_time"];
  s.sweep = std::move(*sweep);
  return s;
}

std::optional<ShippedSweep> find_shipped_sweep(const std::string& dir, const std::string& key,
                                               std::string* why) {
  std::vector<std::string> files;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    if (e.path().extension() == ".json") files.push_back(e.path().string());
  }
  if (ec) {
    if (why != nullptr) *why = dir + ": " + ec.message();
    return std::nullopt;
  }
  std::sort(files.begin(), files.end());
  std::string reasons;
  for (const std::string& f : files) {
    std::string one;
    if (std::optional<ShippedSweep> s = load_shipped_sweep(f, key, &one)) return s;
    reasons += (reasons.empty() ? "" : "; ") + one;
  }
  if (why != nullptr) *why = files.empty() ? dir + ": no .json file" : reasons;
  return std::nullopt;
}

void save_shipped_sweep(const std::string& path, const std::string& key, const ShippedSweep& s) {
  SweepFileNotes notes = note_names();
  notes["made_by"] = s.made_by;
  notes["date"] = s.date;
  notes["commit"] = s.commit;
  notes["wall_time"] = s.wall_time;
  save_sweep_cache(path, key, s.sweep, notes);
}

std::string shipped_note(const ShippedSweep& s) {
  return "shipped results: `" + s.made_by + "`, " + s.date;
}

std::string shipped_detail(const ShippedSweep& s) {
  return s.file + ": made at commit " + s.commit + " in " + s.wall_time;
}

ShippedSweep write_shipped_sweep(const ShippedSweepRequest& request, std::FILE* log) {
  const LoadedModel loaded =
      load_model(request.model_arg, "", WeightStorage::kMapped, WeightFormat::kNative);
  if (!loaded.tokenizer) throw Error(loaded.model->source(), "the model has no tokenizer");
  if (loaded.model->is_random_weights())
    throw Error(loaded.model->source(), "random weights: no quality figure is meaningful");
  const std::string text = default_eval_text_path();
  const std::string key = shipped_sweep_key(*loaded.model, *loaded.tokenizer, text,
                                            request.max_tokens, request.block_size);
  const auto start = std::chrono::steady_clock::now();
  const auto elapsed = [&] {
    return static_cast<long>(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  };
  QualityJob job;
  // No disk cache and no shipped file: every figure is computed now.
  job.start(loaded.model, loaded.tokenizer, text, request.max_tokens, request.block_size);
  long next_report = 30;
  while (job.busy()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    if (log != nullptr && elapsed() >= next_report) {
      next_report += 30;
      std::fprintf(log, "kvscope-ui: quality sweep of %s: %d / %d runs, %ld:%02ld elapsed\n",
                   loaded.model->source().c_str(), std::max(0, job.steps_done() - 1),
                   job.total_steps() - 1, elapsed() / 60, elapsed() % 60);
      std::fflush(log);
    }
  }
  job.wait();
  const std::shared_ptr<QualitySweep> sweep = job.take();
  if (!sweep) throw Error(request.out_path, "the sweep stopped before it finished");
  if (!sweep->error.empty()) throw Error(request.out_path, "the sweep failed: " + sweep->error);
  const long secs = elapsed();
  ShippedSweep s;
  s.made_by = request.made_by;
  s.date = utc_now();
  s.commit = checkout_commit();
  s.wall_time = std::to_string(secs / 60) + " min " + std::to_string(secs % 60) + " s, 1 thread";
  s.sweep = *sweep;
  s.sweep.model = std::filesystem::path(loaded.model->source()).filename().string();
  s.sweep.source = checkout_relative(text);
  s.sweep.cache_note.clear();
  save_shipped_sweep(request.out_path, key, s);
  s.file = request.out_path;
  return s;
}

}  // namespace kvscope::ui
