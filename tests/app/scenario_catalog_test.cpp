// File > Open shipped scenario and Open recent: every scenarios/*.json listed with its one-line
// title and whether its model is on disk; kvscope-ui's default is run.sh's; recent files are kept
// newest first, without duplicates, at most 8, across sessions.
#include "app/core/scenario_catalog.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "app/core/file_menu.h"
#include "engine/common/error.h"
#include "engine/model/locate.h"

namespace kvscope::ui {
namespace {

const std::string kDir = std::string(KVSCOPE_SOURCE_DIR) + "/scenarios";

bool smollm2_on_disk() {
  try {
    locate_model("smollm2");
    return true;
  } catch (const Error&) {
    return false;
  }
}

TEST(ScenarioCatalog, ListsEveryShippedScenarioWithItsLesson) {
  const auto list = shipped_scenarios(kDir);
  std::size_t files = 0;
  for (const auto& e : std::filesystem::directory_iterator(kDir))
    files += e.path().extension() == ".json" && e.path().stem() != "scenario.schema" ? 1 : 0;
  ASSERT_EQ(list.size(), files);
  for (std::size_t i = 0; i < list.size(); ++i) {
    SCOPED_TRACE(list[i].name);
    EXPECT_FALSE(list[i].title.empty());
    if (i > 0) {
      EXPECT_LT(list[i - 1].name, list[i].name);
    }
    if (list[i].model == "smollm2") {
      EXPECT_EQ(list[i].available, smollm2_on_disk()) << list[i].why;
      if (!list[i].available) {
        EXPECT_NE(list[i].why.find("smollm2"), std::string::npos);
      }
    }
  }
}

TEST(ScenarioCatalog, TheDefaultIsRunShs) {
  EXPECT_EQ(std::filesystem::path(default_scenario(kDir)).filename(),
            smollm2_on_disk() ? "smollm2-chat.json" : "minimal.json");
}

TEST(ScenarioCatalog, RecentFilesAreKeptNewestFirstAcrossSessions) {
  const std::string dir = testing::TempDir() + "kvscope-recent-" + std::to_string(getpid());
  std::filesystem::remove_all(dir);
  ASSERT_EQ(setenv("KVSCOPE_CONFIG_DIR", dir.c_str(), 1), 0);
  {
    FileMenu m;
    for (int i = 0; i < 10; ++i) m.note_opened("/runs/r" + std::to_string(i) + ".kvr");
    m.note_opened("/runs/r5.kvr");  // again: moves to the front, not listed twice
    ASSERT_EQ(m.recent().size(), 8u);
    EXPECT_EQ(m.recent()[0], "/runs/r5.kvr");
    EXPECT_EQ(m.recent()[1], "/runs/r9.kvr");
    EXPECT_EQ(m.recent()[7], "/runs/r2.kvr");  // r9..r2 kept of ten, r5 moved up
  }
  FileMenu next;  // a new session reads them back
  next.note_opened("/runs/new.json");
  ASSERT_EQ(next.recent().size(), 8u);
  EXPECT_EQ(next.recent()[0], "/runs/new.json");
  EXPECT_EQ(next.recent()[1], "/runs/r5.kvr");
  unsetenv("KVSCOPE_CONFIG_DIR");
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace kvscope::ui
