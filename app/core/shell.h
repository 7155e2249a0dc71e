// UiShell: everything drawn in one frame except the platform window: the main menu bar, the
// transport bar, the panel windows in a fixed first layout, the help window and error modals.
// It needs an ImGui context but no GLFW or OpenGL, so headless tests and benchmarks drive it too.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "app/core/app_state.h"
#include "app/core/file_menu.h"
#include "app/core/run_session.h"
#include "app/core/theme.h"
#include "app/panels/panel.h"

namespace kvscope::ui {

// What the shell asks of the platform layer after a frame (menu clicks, shortcuts).
struct ShellRequests {
  bool screenshot = false;
  bool toggle_fullscreen = false;
  bool quit = false;
};

class UiShell {
 public:
  UiShell(std::unique_ptr<DataSource> source, Fonts fonts);
  // Shows a loaded run (scenario still computing on its worker, or a recording).
  UiShell(std::unique_ptr<RunSession> session, Fonts fonts);
  ~UiShell();  // stops the worker

  // Opens a scenario or recording (on `model` instead of the scenario's own when given); on
  // failure shows the error in a modal, keeps the current run loaded and returns false. A
  // scenario's first step runs on its worker, not in this call: the current run stays shown,
  // the status line counting the seconds, until that step is there (a later frame, or
  // finish_opening, shows the new run) or failed (its error in a modal, the current run kept).
  // The previous worker is stopped only once the new run is shown. An eval sweep CSV (.csv) is
  // merged into the Quality vs memory panel instead, and its workspace shown.
  bool open(const std::string& path, const PolicyOverride& policy = {},
            const std::string& model = {});
  // Whether a run open() accepted still computes its first step.
  bool opening() const { return pending_ != nullptr; }
  // Waits for that first step (or its failure) and shows the run (tests; screenshots).
  void finish_opening();
  // Attaches to a live KV-event stream (File > Attach) and shows the Live workspace; on failure
  // (a bad endpoint, a port in use) shows the error in a modal and keeps the current run.
  bool attach_live(const AttachRequest& request);
  static constexpr int kLiveWorkspace = 4;
  // The attach status bar's text this frame ("" when not attached; tests).
  const std::string& attach_status() const { return attach_status_; }
  void restart();  // re-runs the loaded scenario from step 0 (with its policy and model override)
  // Jumps to presenter caption `index` (0-based) and applies its view (workspace, attention
  // layer/head or sink grid, compare target), paused there; a caption on another variant first
  // re-runs the scenario on it. True when the view is applied now; false when there is no such
  // caption, or when its step (or its variant's run) is not there yet: then later frames apply it.
  bool go_to_caption(int index);
  bool caption_pending() const { return pending_caption_ >= 0; }
  int num_captions() const;
  RunSession* session() { return session_.get(); }

  // Draws one frame's UI; call between ImGui::NewFrame() and ImGui::Render().
  void frame(double dt_seconds);

  AppState& state() { return state_; }
  std::vector<std::unique_ptr<Panel>>& panels() { return panels_; }
  ShellRequests take_requests();
  // Whether a visible panel still computes in the background (screenshots wait for it).
  bool panels_busy() const;

  void set_presenter(bool on);
  void toggle_help() { show_help_ = !show_help_; }
  void set_fullscreen_flag(bool on) { fullscreen_ = on; }
  const std::string& status() const { return status_; }  // the status line's text (tests)
  void set_status(std::string text) {
    status_ = std::move(text);
    status_age_ = 0.0;
  }
  void show_error(std::string text);  // a modal; the current run stays loaded
  // The last error shown (tests).
  const std::string& error_text() const { return error_; }
  void reset_layout() { layout_dirty_ = true; }

  // Workspaces: named panel arrangements (pool, prefix, attention & quality, compare, live,
  // kernel),
  // each with layouts for several window sizes (shell_layout.h). Switching shows the panels of
  // the layout that fits and hides the others (the View menu brings any back, floating).
  static int num_workspaces();
  static const char* workspace_name(int index);
  // The workspace a short key names, as --view and a caption's view spell it: "pool", "prefix",
  // "attention", "compare", "live", "kernel", "serving" (-1 for anything else).
  static int workspace_of_key(std::string_view key);
  int workspace() const { return workspace_; }
  void set_workspace(int index);  // clamped
  // Which of the workspace's layouts is shown (0: the fullest; see workspaces() in
  // shell_layout.h); chosen every frame from the window's size and fonts.
  int layout() const { return layout_; }

 private:
  void draw_menu_bar();
  void draw_transport_window();
  void draw_panels();
  void draw_help_window();
  void draw_error_modal();
  // The scenario's presenter caption for the selected step (the last one at or before it), in a
  // bar under the panels; PageDown / PageUp jump to the next / previous caption's step.
  void draw_caption_bar();
  float caption_bar_height() const;
  // While attached, a status bar instead: connection per rank, batches, live blocks, lag, gaps.
  void draw_attach_bar(const AttachFeed& feed);
  void attach(std::unique_ptr<RunSession> session);
  // Shows the run open() accepted once it has its first step; shows its error if it failed.
  void promote_pending();
  // open() of a sweep CSV: into the Quality panel (false, with the error in a modal, if bad).
  bool load_sweep_csv_file(const std::string& path);
  void perform(const FileAction& action);
  void place(ImVec2 pos, ImVec2 size);
  // The area the panels share (under the transport bar, over the caption bar), in pixels.
  ImVec2 panel_area() const;
  // Shows layout `layout` of the current workspace (its panels visible, the others hidden) when
  // it is not the one shown.
  void show_layout(int layout);
  void draw_workspace_tabs();
  // Applies the caption go_to_caption is waiting for, when its run and step are there.
  bool apply_pending_caption();

  AppState state_;
  std::unique_ptr<RunSession> session_;  // null when a bare DataSource is shown (tests)
  // A run open() accepted, computing its first step (shown once it has it), what the status line
  // says then, and since when it waits.
  std::unique_ptr<RunSession> pending_;
  std::string pending_done_;
  double pending_seconds_ = 0.0;
  // Runs replaced before their first step: asked to stop, freed once their worker ended (a
  // SmolLM2 prefill is not interrupted mid-step, and joining it would stop the window).
  std::vector<std::unique_ptr<RunSession>> retiring_;
  FileMenu file_menu_;
  Fonts fonts_;
  std::vector<std::unique_ptr<Panel>> panels_;
  ShellRequests requests_;
  bool show_help_ = false;
  bool fullscreen_ = false;
  bool layout_dirty_ = true;
  int workspace_ = 0;
  int layout_ = -1;  // the shown layout of workspace_; -1 before the first choice
  ImVec2 last_display_{0, 0};
  float menu_height_ = 0.0f;
  float tabs_end_x_ = 0.0f;  // where the workspace tabs end in the menu bar
  std::string status_;
  double status_age_ = 0.0;
  std::string error_;
  std::string attach_status_;
  bool error_pending_ = false;
  int model_request_frames_ = 0;    // frames AppState::model_request has been pending
  int pending_caption_ = -1;        // the caption go_to_caption waits for; -1 when none
  bool caption_restarted_ = false;  // its variant's run was requested (once per caption)
};

}  // namespace kvscope::ui
