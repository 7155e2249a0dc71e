#include "cli/sdpa_baseline.h"

#include <sys/wait.h>

#include <cstdio>
#include <nlohmann/json.hpp>

#include "engine/common/error.h"

namespace kvscope::cli {
namespace {

std::string joined(const std::vector<int>& values) {
  std::string out;
  for (int v : values) {
    if (!out.empty()) out.push_back(',');
    out.append(std::to_string(v));
  }
  return out;
}

// `text` in single quotes for sh (a quote inside closes, escapes and reopens them).
std::string quoted(const std::string& text) {
  std::string out(1, '\'');
  for (char c : text) {
    if (c == '\'') {
      out.append("'\\''");
    } else {
      out.push_back(c);
    }
  }
  out.push_back('\'');
  return out;
}

}  // namespace

std::string sdpa_script() {
  return std::string(KVSCOPE_SOURCE_DIR) + "/scripts/sdpa_bench.py";
}

SdpaResult parse_sdpa_output(const std::string& text, const std::string& script) {
  const auto bad = [&](const std::string& what) {
    throw Error(script, "expected its JSON result, got " + what);
  };
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("available") || !j["available"].is_boolean())
    bad("'" + text.substr(0, 80) + "'");
  SdpaResult r;
  r.available = j["available"].get<bool>();
  if (!r.available) {
    r.reason = j.value("reason", std::string("no reason given"));
    return r;
  }
  if (!j.contains("rows") || !j["rows"].is_array()) bad("no \"rows\" array");
  r.torch = j.value("torch", std::string());
  r.device = j.value("device", std::string());
  for (const nlohmann::json& row : j["rows"]) {
    if (!row.is_object() || !row.contains("batch") || !row.contains("context") ||
        !row["batch"].is_number_integer() || !row["context"].is_number_integer())
      bad("a row without an integer batch and context: " + row.dump());
    SdpaRow s;
    s.batch = row["batch"].get<int>();
    s.context = row["context"].get<int>();
    if (row.contains("error")) {
      s.error = row["error"].is_string() ? row["error"].get<std::string>() : row["error"].dump();
    } else {
      if (!row.contains("ms") || !row["ms"].is_number() || !row.contains("kv_gb_per_s") ||
          !row["kv_gb_per_s"].is_number())
        bad("a row without ms and kv_gb_per_s: " + row.dump());
      s.ms = row["ms"].get<double>();
      s.kv_gb_per_s = row["kv_gb_per_s"].get<double>();
      s.gqa = row.value("gqa", std::string());
    }
    r.rows.push_back(s);
  }
  return r;
}

SdpaResult run_sdpa(const std::string& script, const std::vector<int>& batches,
                    const std::vector<int>& contexts, int repeat) {
  const std::string command = "python3 " + quoted(script) + " --batch " + joined(batches) +
                              " --contexts " + joined(contexts) + " --repeat " +
                              std::to_string(repeat);
  std::FILE* p = popen(command.c_str(), "r");
  SdpaResult none;
  if (p == nullptr) {
    none.reason = "could not start python3";
    return none;
  }
  std::string out;
  char buf[4096];
  for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  const int status = pclose(p);
  if (status == -1 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    none.reason = command + " failed (exit status " +
                  std::to_string(WIFEXITED(status) ? WEXITSTATUS(status) : -1) + ")";
    return none;
  }
  return parse_sdpa_output(out, script);
}

void append_sdpa_rows(const SdpaResult& r, const std::map<std::pair<int, int>, Fp16Figures>& fp16,
                      nlohmann::json& rows, std::string& text) {
  for (const SdpaRow& row : r.rows) {
    const auto ours = fp16.find({row.context, row.batch});
    const double copy_gbs = ours != fp16.end() ? ours->second.copy_gb_per_s : 0.0;
    const double vs = ours != fp16.end() && row.error.empty() ? ours->second.ms / row.ms : 0.0;
    nlohmann::json j = {{"format", "sdpa-fp16"},  {"context", row.context}, {"batch", row.batch},
                        {"layout", "contiguous"}, {"launch", "torch"},      {"emulated", false}};
    char line[256];
    if (!row.error.empty()) {
      j["error"] = row.error;
      std::snprintf(line, sizeof line, "%-9s %7d %5d %-10s %s\n", "sdpa-fp16", row.context,
                    row.batch, "contiguous", row.error.c_str());
    } else {
      j["ms"] = row.ms;
      j["kv_gb_per_s"] = row.kv_gb_per_s;
      j["gqa"] = row.gqa;
      if (copy_gbs > 0) j["of_copy"] = row.kv_gb_per_s / copy_gbs;
      if (vs > 0) j["kvscope_fp16_time_over_sdpa"] = vs;
      char of_copy[32] = "-", versus[64] = ", no kvscope fp16 row to compare";
      if (copy_gbs > 0)
        std::snprintf(of_copy, sizeof of_copy, "%.1f%%", 100.0 * row.kv_gb_per_s / copy_gbs);
      if (vs > 0) std::snprintf(versus, sizeof versus, ", kvscope fp16 time / SDPA's %.2fx", vs);
      std::snprintf(line, sizeof line,
                    "%-9s %7d %5d %-10s %10.3f %12.2f %12s %8s  torch (gqa %s)%s\n", "sdpa-fp16",
                    row.context, row.batch, "contiguous", row.ms, row.kv_gb_per_s, "", of_copy,
                    row.gqa.c_str(), versus);
    }
    rows.push_back(j);
    text += line;
  }
}

}  // namespace kvscope::cli
