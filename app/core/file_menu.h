// FileMenu: the File menu's items and the small path-input popup they open (ImGui has no file
// dialog). It only collects what the user asked for; the shell carries it out. In the browser
// build, Open asks the browser's file picker instead and Save / Export name a download.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "app/core/attach_feed.h"
#include "app/core/scenario_catalog.h"

namespace kvscope::ui {

struct FileAction {
  enum class Kind { kOpen, kAttach, kSaveRecording, kExportCsv, kRestart, kScreenshot, kQuit };
  Kind kind;
  std::string path;      // for kOpen, kSaveRecording, kExportCsv
  AttachRequest attach;  // for kAttach
};

class FileMenu {
 public:
  // Items inside an open "File" menu. `loaded` is the current run's path; `can_restart` is true
  // for scenarios.
  void draw_items(const std::string& loaded, bool can_restart);
  // The path popup and the attach dialog, and the shortcuts Ctrl+O, Ctrl+S, Ctrl+Shift+A (call
  // once per frame, outside any menu; `loaded` as for draw_items); returns a confirmed action.
  std::optional<FileAction> draw_popup(const std::string& loaded);
  // Opens the attach dialog (File > Attach, Ctrl+Shift+A).
  void ask_attach();
  // A direct action chosen from the menu this frame (open a shipped or recent file, restart,
  // screenshot, quit).
  std::optional<FileAction> take_direct();
  // Notes a file opened (File > Open recent lists the last 8, newest first). They are kept in
  // $KVSCOPE_CONFIG_DIR (or $XDG_CONFIG_HOME/kvscope, ~/.config/kvscope)/recent.txt between
  // sessions; a file that cannot be read or written there is not an error.
  void note_opened(const std::string& path);
  const std::vector<std::string>& recent() const { return recent_; }

 private:
  void ask(FileAction::Kind kind, const std::string& initial);
  // The path popup on the desktop; the browser's file picker or a download in the page.
  void ask_or_pick(FileAction::Kind kind, const std::string& loaded);
  // What the popup offers: `loaded` to open, a name derived from it to save or export.
  static std::string default_name(FileAction::Kind kind, const std::string& loaded);

  void load_recent();
  void save_recent() const;

  std::optional<FileAction> direct_;
  std::vector<ShippedScenario> shipped_;  // read when the menu first opens
  bool shipped_read_ = false;
  std::vector<std::string> recent_;
  bool recent_read_ = false;
  FileAction::Kind asking_ = FileAction::Kind::kOpen;
  bool popup_pending_ = false;
  bool focus_input_ = false;
  char path_[1024] = {};
  // The attach dialog's fields (kept between openings).
  std::optional<FileAction> draw_attach_dialog();
  bool attach_pending_ = false;
  char endpoint_[256] = "tcp://127.0.0.1:5557";
  char replay_[256] = "tcp://127.0.0.1:5567";
  char topic_[128] = "";
  int dp_ = 1;
  int slots_ = 65536;
  bool bind_ = false;
  bool use_replay_ = true;
};

}  // namespace kvscope::ui
