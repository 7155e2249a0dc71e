// The shipped scenarios, read from their files.
#include "app/core/scenario_catalog.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "engine/common/error.h"
#include "engine/model/locate.h"

namespace kvscope::ui {

namespace {

// Whether a model argument resolves here (locate_model's one-line reason when not).
bool model_found(const std::string& model, std::string* why) {
  if (model.rfind("synthetic:", 0) == 0) return true;
  try {
    locate_model(model);
    return true;
  } catch (const Error& e) {
    *why = e.what();
    return false;
  }
}

}  // namespace

std::vector<ShippedScenario> shipped_scenarios(const std::string& dir) {
  namespace fs = std::filesystem;
  std::vector<ShippedScenario> out;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    const fs::path& p = e.path();
    if (p.extension() != ".json" || p.stem() == "scenario.schema") continue;
    ShippedScenario s;
    s.path = p.string();
    s.name = p.stem().string();
    std::ifstream in(p);
    const nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object()) {
      s.available = false;
      s.why = s.path + ": not valid JSON";
      out.push_back(std::move(s));
      continue;
    }
    s.title = j.value("title", std::string());
    if (j.contains("model")) {
      const nlohmann::json& m = j["model"];
      if (m.is_string()) s.model = m.get<std::string>();
      if (m.is_object()) s.model = m.value("path", m.value("synthetic", std::string()));
    }
    s.available = model_found(s.model, &s.why);
    out.push_back(std::move(s));
  }
  std::sort(out.begin(), out.end(),
            [](const ShippedScenario& a, const ShippedScenario& b) { return a.name < b.name; });
  return out;
}

std::string default_scenario(const std::string& dir) {
  std::string why;
  const std::string chat = (std::filesystem::path(dir) / "smollm2-chat.json").string();
  if (std::filesystem::exists(chat) && model_found("smollm2", &why)) return chat;
  return (std::filesystem::path(dir) / "minimal.json").string();
}

}  // namespace kvscope::ui
