// The scenarios shipped in scenarios/: what File > Open shipped scenario lists (name, its one-line
// title, whether its model is on disk), and the scenario kvscope-ui opens with no argument.
#pragma once

#include <string>
#include <vector>

namespace kvscope::ui {

struct ShippedScenario {
  std::string path;   // scenarios/NAME.json
  std::string name;   // NAME
  std::string title;  // the scenario's "title": its lesson in one line
  std::string model;  // its "model" ("" = the default, stories260K)
  bool available = true;
  std::string why;  // when not available: what is missing and how to get it (one line)
};

// Every scenarios/*.json in `dir` but the schema, sorted by name. A file that does not parse is
// listed unavailable with its error (never thrown: a menu must open).
std::vector<ShippedScenario> shipped_scenarios(const std::string& dir);

// What kvscope-ui opens with no argument, as scripts/run.sh does: smollm2-chat.json when
// SmolLM2-135M is found, else minimal.json (stories260K).
std::string default_scenario(const std::string& dir);

}  // namespace kvscope::ui
