// FileMenu: the File menu's items and the small path-input popup they open (ImGui has no file
// dialog). It only collects what the user asked for; the shell carries it out.
#pragma once

#include <optional>
#include <string>

namespace kvscope::ui {

struct FileAction {
  enum class Kind { kOpen, kSaveRecording, kExportCsv, kRestart, kScreenshot, kQuit };
  Kind kind;
  std::string path;  // for kOpen, kSaveRecording, kExportCsv
};

class FileMenu {
 public:
  // Items inside an open "File" menu. `loaded` is the current run's path; `can_restart` is true
  // for scenarios.
  void draw_items(const std::string& loaded, bool can_restart);
  // The path popup (call once per frame, outside any menu); returns a confirmed action.
  std::optional<FileAction> draw_popup();
  // A direct action chosen from the menu this frame (restart, screenshot, quit).
  std::optional<FileAction> take_direct();

 private:
  void ask(FileAction::Kind kind, const std::string& initial);

  std::optional<FileAction> direct_;
  FileAction::Kind asking_ = FileAction::Kind::kOpen;
  bool popup_pending_ = false;
  bool focus_input_ = false;
  char path_[1024] = {};
};

}  // namespace kvscope::ui
