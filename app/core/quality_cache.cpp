// Quality sweep disk cache: key, path, JSON save and load.
#include "app/core/quality_cache.h"

#include <sys/stat.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "engine/common/atomic_write.h"
#include "engine/common/error.h"

namespace kvscope::ui {

namespace {

// "path size mtime" of a file, or "" when it cannot be stat'ed.
std::string file_identity(const std::string& path) {
  struct stat st {};
  if (path.empty() || ::stat(path.c_str(), &st) != 0) return {};
  return path + " " + std::to_string(static_cast<long long>(st.st_size)) + " " +
         std::to_string(static_cast<long long>(st.st_mtim.tv_sec)) + "." +
         std::to_string(static_cast<long long>(st.st_mtim.tv_nsec));
}

const char* family_name(QualityFamily f) {
  switch (f) {
    case QualityFamily::kFormat:
      return "format";
    case QualityFamily::kMla:
      return "mla";
    case QualityFamily::kEviction:
      return "eviction";
  }
  return "?";
}

QualityFamily parse_family(const std::string& s) {
  if (s == "format") return QualityFamily::kFormat;
  if (s == "mla") return QualityFamily::kMla;
  if (s == "eviction") return QualityFamily::kEviction;
  throw Error("family", "expected format, mla or eviction, got \"" + s + "\"");
}

}  // namespace

std::string sweep_cache_dir() {
  std::string base;
  if (const char* d = std::getenv("KVSCOPE_CACHE_DIR"); d != nullptr && *d != '\0') {
    base = d;
  } else if (const char* x = std::getenv("XDG_CACHE_HOME"); x != nullptr && *x != '\0') {
    base = std::string(x) + "/kvscope";
  } else if (const char* h = std::getenv("HOME"); h != nullptr && *h != '\0') {
    base = std::string(h) + "/.cache/kvscope";
  } else {
    return {};
  }
  return base + "/quality";
}

std::string sweep_cache_key(const std::string& model_path, const std::string& text_path,
                            long max_tokens, int block_size, const std::string& variants) {
  const std::string model = file_identity(model_path), text = file_identity(text_path);
  if (model.empty() || text.empty()) return {};
  return "kvscope quality sweep " + std::to_string(kSweepFormatVersion) + "\nmodel " + model +
         "\ntext " + text + "\ntokens " + std::to_string(max_tokens) + "\nblock " +
         std::to_string(block_size) + "\nvariants " + variants + "\n";
}

std::string sweep_cache_path(const std::string& dir, const std::string& key) {
  std::uint64_t h = 1469598103934665603ull;  // FNV-1a 64
  for (unsigned char c : key) {
    h ^= c;
    h *= 1099511628211ull;
  }
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  return dir + "/" + hex + ".json";
}

void save_sweep_cache(const std::string& path, const std::string& key, const QualitySweep& s,
                      const SweepFileNotes& notes) {
  nlohmann::json j;
  j["key"] = key;
  for (const auto& [name, text] : notes) j[name] = text;
  j["model"] = s.model;
  j["source"] = s.source;
  j["positions"] = s.positions;
  j["windows"] = s.windows;
  j["block_size"] = s.block_size;
  j["reference_bytes_per_token"] = s.reference_bytes_per_token;
  nlohmann::json points = nlohmann::json::array();
  for (const QualityPoint& p : s.points) {
    const QualityReport& r = p.report;
    points.push_back({{"family", family_name(p.family)},
                      {"series", p.series},
                      {"label", p.label},
                      {"bytes_per_token", p.bytes_per_token},
                      {"variant", r.variant},
                      {"positions", r.positions},
                      {"windows", r.windows},
                      {"ppl_reference", r.ppl_reference},
                      {"ppl_variant", r.ppl_variant},
                      {"kl_mean", r.kl_mean},
                      {"kl_max", r.kl_max},
                      {"top1_agreement", r.top1_agreement},
                      {"mean_window_tokens", r.mean_window_tokens},
                      {"effective_bytes_per_token", r.effective_bytes_per_token},
                      {"reference_bytes_per_token", r.reference_bytes_per_token}});
  }
  j["points"] = std::move(points);
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  if (ec) throw Error(path, "cannot create the cache directory: " + ec.message());
  // nlohmann writes doubles with the digits to read them back exactly.
  write_file_atomically(path, [&](std::ostream& out) { out << j.dump(1) << '\n'; });
}

std::optional<QualitySweep> load_sweep_cache(const std::string& path, const std::string& key,
                                             std::string* why, SweepFileNotes* notes) {
  const auto fail = [&](const std::string& what) -> std::optional<QualitySweep> {
    if (why != nullptr) *why = path + ": " + what;
    return std::nullopt;
  };
  std::ifstream in(path, std::ios::binary);
  if (!in) return fail("not cached yet");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const std::exception& e) {
    return fail(std::string("unreadable (") + e.what() + ")");
  }
  try {
    if (j.at("key").get<std::string>() != key) return fail("holds another sweep's key");
    QualitySweep s;
    s.model = j.at("model").get<std::string>();
    s.source = j.at("source").get<std::string>();
    s.positions = j.at("positions").get<long>();
    s.windows = j.at("windows").get<int>();
    s.block_size = j.at("block_size").get<int>();
    s.reference_bytes_per_token = j.at("reference_bytes_per_token").get<double>();
    for (const nlohmann::json& p : j.at("points")) {
      QualityPoint q;
      q.family = parse_family(p.at("family").get<std::string>());
      q.series = p.at("series").get<std::string>();
      q.label = p.at("label").get<std::string>();
      q.bytes_per_token = p.at("bytes_per_token").get<double>();
      QualityReport& r = q.report;
      r.variant = p.at("variant").get<std::string>();
      r.positions = p.at("positions").get<long>();
      r.windows = p.at("windows").get<int>();
      r.ppl_reference = p.at("ppl_reference").get<double>();
      r.ppl_variant = p.at("ppl_variant").get<double>();
      r.kl_mean = p.at("kl_mean").get<double>();
      r.kl_max = p.at("kl_max").get<double>();
      r.top1_agreement = p.at("top1_agreement").get<double>();
      r.mean_window_tokens = p.at("mean_window_tokens").get<double>();
      r.effective_bytes_per_token = p.at("effective_bytes_per_token").get<double>();
      r.reference_bytes_per_token = p.at("reference_bytes_per_token").get<double>();
      s.points.push_back(std::move(q));
    }
    if (s.points.empty()) return fail("holds no point");
    if (notes != nullptr) {
      for (auto& [name, text] : *notes) {
        const auto it = j.find(name);
        if (it == j.end() || !it->is_string())
          return fail("expected a text field \"" + name + "\", got none");
        text = it->get<std::string>();
      }
    }
    return s;
  } catch (const std::exception& e) {
    return fail(std::string("malformed (") + e.what() + ")");
  }
}

}  // namespace kvscope::ui
