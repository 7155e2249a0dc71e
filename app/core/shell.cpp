// UiShell: menu bar, transport, layout and the help and error windows.
#include "app/core/shell.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <string_view>
#include <thread>
#include <vector>

#include "app/core/shell_layout.h"
#include "app/core/transport.h"
#include "app/panels/attach_panel.h"
#include "app/panels/quality_panel.h"
#include "app/panels/registry.h"
#include "app/widgets/layout_probe.h"
#include "app/widgets/widgets.h"
#include "engine/analysis/metrics_csv.h"
#include "engine/common/error.h"
#if defined(__EMSCRIPTEN__)
#include "app/web/web_page.h"
#endif

namespace kvscope::ui {

namespace {

// A file the user saved: in the browser build it is handed to the browser as a download (the
// page's file system goes with the tab); on the desktop it is where the user said.
void offer_download([[maybe_unused]] const std::string& path) {
#if defined(__EMSCRIPTEN__)
  web_offer_download(path);
#endif
}

// The loaded scenario's presenter captions (null when it has none, or for a recording).
const std::vector<Caption>* captions_of(const AppState& state) {
  const std::shared_ptr<const RunInfo> info = state.source().run_info();
  return info && !info->captions.empty() ? &info->captions : nullptr;
}

const Layout& layout_of(int workspace, int layout) {
  const Workspace& ws = workspaces()[static_cast<std::size_t>(workspace)];
  return ws.layouts[static_cast<std::size_t>(
      std::clamp(layout, 0, static_cast<int>(ws.layouts.size()) - 1))];
}

const Slot* find_slot(const Layout& layout, const char* panel) {
  for (const Slot& s : layout.slots)
    if (std::string_view(s.panel) == panel) return &s;
  return nullptr;
}

}  // namespace

int UiShell::num_workspaces() {
  return static_cast<int>(workspaces().size());
}

const char* UiShell::workspace_name(int index) {
  return workspaces()[static_cast<std::size_t>(std::clamp(index, 0, num_workspaces() - 1))].name;
}

void UiShell::set_workspace(int index) {
  workspace_ = std::clamp(index, 0, num_workspaces() - 1);
  layout_ = -1;  // frame() picks the layout that fits and shows its panels
  show_layout(choose_layout(workspaces()[static_cast<std::size_t>(workspace_)], panel_area()));
}

ImVec2 UiShell::panel_area() const {
  const ImVec2 display = ImGui::GetIO().DisplaySize;
  const float menu = menu_height_ > 0.0f ? menu_height_ : ImGui::GetFrameHeight();
  const float top = menu + ImGui::GetFrameHeight() + ImGui::GetStyle().WindowPadding.y * 2.0f;
  return ImVec2(display.x - kLayoutMargin, display.y - top - kLayoutMargin - caption_bar_height());
}

void UiShell::show_layout(int layout) {
  if (layout == layout_) return;
  layout_ = layout;
  const Layout& l = layout_of(workspace_, layout_);
  for (auto& p : panels_) p->visible = find_slot(l, p->title()) != nullptr;
  layout_dirty_ = true;
}

UiShell::UiShell(std::unique_ptr<DataSource> source, Fonts fonts)
    : state_(std::move(source)), fonts_(fonts), panels_(make_panels()) {
  set_presenter(false);
  set_workspace(0);
}

UiShell::UiShell(std::unique_ptr<RunSession> session, Fonts fonts)
    : UiShell(session->make_source(), fonts) {
  attach(std::move(session));
}

UiShell::~UiShell() {
  if (session_) session_->stop();
}

void UiShell::attach(std::unique_ptr<RunSession> session) {
  if (session_) session_->stop();
  state_.set_source(session->make_source());
  session_ = std::move(session);
  state_.set_step(0);
  state_.playing = session_->is_running();  // follow the run live as it computes
  state_.follow_live = state_.playing;
  state_.pause_steps.clear();
  if (const std::vector<Caption>* captions = captions_of(state_)) {
    for (const Caption& c : *captions)
      if (c.view.pause) state_.pause_steps.push_back(c.step);
  }
}

bool UiShell::open(const std::string& path, const PolicyOverride& policy,
                   const std::string& model) {
  if (std::filesystem::path(path).extension() == ".csv" && policy.empty() && model.empty())
    return load_sweep_csv_file(path);
  std::unique_ptr<RunSession> opened;
  try {
    opened = RunSession::open(path, false, policy, model, RunSession::FirstStep::kOnWorker);
  } catch (const std::exception& e) {
    show_error(e.what());
    return false;
  }
  if (pending_) {  // replaced before its first step
    pending_->request_stop();
    retiring_.push_back(std::move(pending_));
  }
  pending_ = std::move(opened);
  pending_done_ = policy.empty() ? "opened " + path : "restarted with " + policy.describe();
  pending_seconds_ = 0.0;
  promote_pending();  // a recording, or a first step already done
  return true;
}

bool UiShell::load_sweep_csv_file(const std::string& path) {
  QualityPanel* quality = nullptr;
  for (const auto& p : panels_)
    if (auto* q = dynamic_cast<QualityPanel*>(p.get())) quality = q;
  if (quality == nullptr || !quality->load_csv(path)) {
    show_error(quality != nullptr ? quality->error() : path + ": no Quality panel to show it in");
    return false;
  }
  set_workspace(workspace_of_key("attention"));  // where the Quality panel is
  set_status("loaded " + path + " into Quality vs memory");
  return true;
}

void UiShell::promote_pending() {
  std::erase_if(retiring_, [](const std::unique_ptr<RunSession>& r) { return !r->is_running(); });
  if (!pending_) return;
  if (pending_->has_step()) {
    attach(std::move(pending_));
    set_status(pending_done_);
    return;
  }
  if (!pending_->is_running()) {  // the worker stopped before a first step
    show_error(pending_->first_step_error());
    pending_.reset();
    return;
  }
  set_status(pending_->first_step_line(pending_seconds_));
}

void UiShell::finish_opening() {
  while (pending_ && !pending_->has_step() && pending_->is_running())
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  promote_pending();
}

bool UiShell::attach_live(const AttachRequest& request) {
  // A stream being followed lets go of its sockets first (attaching again to the same port in
  // bind mode needs it); its recording stays shown if the new attach fails.
  if (session_ && session_->attach_feed()) session_->stop();
  try {
    attach(RunSession::attach(request));
    set_workspace(kLiveWorkspace);
    set_status((request.bind ? "listening at " : "attached to ") + request.endpoint);
    return true;
  } catch (const std::exception& e) {
    show_error(e.what());
    return false;
  }
}

void UiShell::restart() {
  if (!session_ || !session_->is_scenario()) return;
  const std::string path = session_->path();  // a copy: open() replaces (and frees) session_
  const std::shared_ptr<const RunInfo> info = session_->run_info();
  open(path, info ? info->override : PolicyOverride{}, info ? info->model_override : "");
}

void UiShell::perform(const FileAction& action) {
  using Kind = FileAction::Kind;
  try {
    switch (action.kind) {
      case Kind::kOpen:
        if (open(action.path)) file_menu_.note_opened(action.path);  // File > Open recent
        break;
      case Kind::kAttach:
        attach_live(action.attach);
        break;
      case Kind::kRestart:
        restart();
        break;
      case Kind::kSaveRecording:
        if (!session_) throw Error(action.path, "no run is loaded");
        session_->timeline()->save(action.path);
        set_status("saved " + action.path + (state_.is_live() ? " (run still computing)" : ""));
        offer_download(action.path);
        break;
      case Kind::kExportCsv:
        write_metrics_csv(action.path, state_.metrics_history());
        set_status("wrote " + action.path);
        offer_download(action.path);
        break;
      case Kind::kScreenshot:
        requests_.screenshot = true;
        break;
      case Kind::kQuit:
        requests_.quit = true;
        break;
    }
  } catch (const std::exception& e) {
    show_error(e.what());
  }
}

bool UiShell::panels_busy() const {
  for (const auto& p : panels_)
    if (p->visible && p->busy()) return true;
  return false;
}

ShellRequests UiShell::take_requests() {
  ShellRequests r = requests_;
  requests_ = {};
  return r;
}

void UiShell::set_presenter(bool on) {
  state_.presenter = on;
  apply_style(on);
  use_fonts(fonts_, on);
  layout_dirty_ = true;
}

void UiShell::show_error(std::string text) {
  error_ = std::move(text);
  error_pending_ = true;
}

void UiShell::frame(double dt_seconds) {
  pending_seconds_ += dt_seconds;
  promote_pending();  // a run opened since: shown once it has its first step
  if (session_) {
    if (std::optional<std::string> e = session_->take_error()) show_error(*e);
  }
  apply_pending_caption();  // a caption waiting for its step or its variant's run
  const ImGuiIO& io = ImGui::GetIO();
  if (!io.WantTextInput && io.KeyCtrl && ImGui::IsKeyPressed('R'))  // GLFW: ASCII
    restart();
  for (int i = 0; i < num_workspaces() && i < 9; ++i) {
    if (!io.WantTextInput && io.KeyCtrl && ImGui::IsKeyPressed('1' + i)) set_workspace(i);
  }
  state_.advance(dt_seconds);
  status_age_ += dt_seconds;
  handle_transport_keys(state_);
  const ImVec2 display = ImGui::GetIO().DisplaySize;
  if (display.x != last_display_.x || display.y != last_display_.y) layout_dirty_ = true;
  last_display_ = display;
  probe_clear();
  // The layout that fits the window (its size, fonts and caption bar may have changed).
  show_layout(choose_layout(workspaces()[static_cast<std::size_t>(workspace_)], panel_area()));
  draw_menu_bar();
  draw_transport_window();
  draw_panels();
  draw_caption_bar();
  if (state_.detach_request) {
    state_.detach_request = false;
    if (session_ && session_->attach_feed()) {
      session_->stop();  // the recording stays loaded: scrub it, save it
      set_status("detached; File > Save recording keeps what was recorded");
    }
  }
  if (state_.restart_request) {
    const PolicyOverride policy = *state_.restart_request;
    state_.restart_request.reset();
    if (session_ && session_->is_scenario()) {
      const std::string path = session_->path();  // a copy: open() frees session_
      const std::shared_ptr<const RunInfo> info = session_->run_info();
      open(path, policy, info ? info->model_override : "");  // the policy changes, not the model
    }
  }
  if (state_.model_request) {
    // The model loads on this (the UI) thread and the window stops for it (about 2 s for
    // SmolLM2-135M): first two frames say so (status line, Controls panel), then the load.
    if (model_request_frames_++ == 0) {
      const std::string& m = *state_.model_request;
      set_status("loading " +
                 (m.empty() ? std::string("the scenario's model") : model_display_name(m)) + "...");
    }
    if (model_request_frames_ > 2) {
      const std::string model = *state_.model_request;
      state_.model_request.reset();
      model_request_frames_ = 0;
      if (session_ && session_->is_scenario()) {
        const std::string path = session_->path();  // a copy: open() frees session_
        const std::shared_ptr<const RunInfo> info = session_->run_info();
        if (open(path, info ? info->override : PolicyOverride{}, model)) {  // same policy
          RunSession& now = pending_ ? *pending_ : *session_;
          const std::string done = "restarted on " + now.run_info()->model_name;
          if (pending_)
            pending_done_ = done;  // the status line once the run is shown
          else
            set_status(done);
        }
      }
    }
  }
  draw_help_window();
  draw_error_modal();
  if (std::optional<FileAction> a =
          file_menu_.draw_popup(session_ ? session_->path() : std::string()))
    perform(*a);
  if (std::optional<FileAction> a = file_menu_.take_direct()) perform(*a);
  layout_dirty_ = false;
}

void UiShell::draw_menu_bar() {
  if (!ImGui::BeginMainMenuBar()) return;
  menu_height_ = ImGui::GetWindowSize().y;
  if (ImGui::BeginMenu("File")) {
    file_menu_.draw_items(session_ ? session_->path() : std::string(),
                          session_ && session_->is_scenario());
    ImGui::EndMenu();
  }
  if (ImGui::BeginMenu("View")) {
    for (int i = 0; i < num_workspaces(); ++i) {
      if (ImGui::MenuItem(workspaces()[static_cast<std::size_t>(i)].name,
                          workspaces()[static_cast<std::size_t>(i)].key, workspace_ == i))
        set_workspace(i);
    }
    // The panels of this layout, then those it leaves out at this window size (each opens as a
    // floating window over the layout).
    const Layout& shown = layout_of(workspace_, layout_);
    for (int pass = 0; pass < 2; ++pass) {
      ImGui::Separator();
      if (pass == 1) ImGui::TextDisabled("Not in this layout (a larger window shows more)");
      for (auto& p : panels_) {
        if ((find_slot(shown, p->title()) != nullptr) == (pass == 0))
          ImGui::MenuItem(p->title(), nullptr, &p->visible);
      }
    }
    ImGui::Separator();
    if (ImGui::MenuItem("Presenter mode", "P", state_.presenter)) set_presenter(!state_.presenter);
    if (ImGui::MenuItem("Full screen", "F11", fullscreen_)) requests_.toggle_fullscreen = true;
    if (ImGui::MenuItem("Reset layout")) layout_dirty_ = true;
    ImGui::EndMenu();
  }
  if (ImGui::BeginMenu("Help")) {
    if (ImGui::MenuItem("Shortcuts and concepts", "F1", show_help_)) show_help_ = !show_help_;
    ImGui::EndMenu();
  }
  draw_workspace_tabs();
  // Right side: what is loaded, and whether it is real.
  const TimelineHeader& header = state_.header();
  const std::string what = header.title + "  |  " + header.allocator +
                           (header.kv_format.empty() ? "" : ", " + header.kv_format);
  const char* tag = state_.is_demo()
                        ? "DEMO DATA"
                        : (state_.header().random_weights ? "RANDOM WEIGHTS" : nullptr);
  const float tag_w = tag ? ImGui::CalcTextSize(tag).x + 24.0f : 0.0f;
  const float status_w = (!status_.empty() && status_age_ < 6.0)
                             ? ImGui::CalcTextSize(status_.c_str()).x + 24.0f
                             : 0.0f;
  // Right-aligned after the workspace tabs; what does not fit is cut with an ellipsis (the
  // whole text in a tooltip), never drawn over the tabs.
  const float room = ImGui::GetWindowWidth() - tabs_end_x_ - 24.0f - tag_w - status_w - 16.0f;
  std::string shown = what;
  if (ImGui::CalcTextSize(shown.c_str()).x > room) {
    while (!shown.empty() && ImGui::CalcTextSize((shown + "...").c_str()).x > room) {
      // Drop a whole UTF-8 character (its continuation bytes, then its lead byte).
      while (!shown.empty() && (static_cast<unsigned char>(shown.back()) & 0xC0) == 0x80)
        shown.pop_back();
      if (!shown.empty()) shown.pop_back();
    }
    shown = shown.empty() ? std::string() : shown + "...";
  }
  const float x =
      ImGui::GetWindowWidth() - ImGui::CalcTextSize(shown.c_str()).x - tag_w - status_w - 16.0f;
  ImGui::SameLine(std::max(x, tabs_end_x_ + 24.0f));
  if (status_w > 0) {
    ImGui::TextColored(ImGui::ColorConvertU32ToFloat4(palette(state_.presenter).accent), "%s",
                       status_.c_str());
    ImGui::SameLine(0, 24);
  }
  ImGui::TextDisabled("%s", shown.c_str());
  if (shown != what) item_tooltip(what.c_str());
  if (tag) {
    ImGui::SameLine(0, 12);
    const Palette& p = palette(state_.presenter);
    badge(tag, state_.is_demo() ? p.badge_demo : p.badge_random);
    item_tooltip(state_.is_demo() ? state_.source().describe().c_str()
                                  : "A synthetic model: quality numbers are meaningless here");
  }
  ImGui::EndMainMenuBar();
}

void UiShell::draw_workspace_tabs() {
  ImGui::SameLine(0, 24);
  const Palette& pal = palette(state_.presenter);
  for (int i = 0; i < num_workspaces(); ++i) {
    const bool active = workspace_ == i;
    ImGui::PushStyleColor(ImGuiCol_Text, active ? pal.text : pal.text_dim);
    ImGui::PushStyleColor(ImGuiCol_Header, mix_color(pal.panel_bg, pal.accent, 0.35f));
    const char* name = workspaces()[static_cast<std::size_t>(i)].name;
    if (ImGui::Selectable(name, active, 0, ImVec2(ImGui::CalcTextSize(name).x, 0)))
      set_workspace(i);
    ImGui::PopStyleColor(2);
    item_tooltip("Workspace: a layout of panels", workspaces()[static_cast<std::size_t>(i)].key);
    ImGui::SameLine(0, 14);
  }
  tabs_end_x_ = ImGui::GetCursorPosX();
  ImGui::NewLine();
}

void UiShell::draw_transport_window() {
  const ImVec2 display = ImGui::GetIO().DisplaySize;
  const float h = ImGui::GetFrameHeight() + ImGui::GetStyle().WindowPadding.y * 2.0f;
  ImGui::SetNextWindowPos(ImVec2(0, menu_height_));
  ImGui::SetNextWindowSize(ImVec2(display.x, h));
  const ImGuiWindowFlags flags = ImGuiWindowFlags_NoDecoration | ImGuiWindowFlags_NoMove |
                                 ImGuiWindowFlags_NoSavedSettings |
                                 ImGuiWindowFlags_NoBringToFrontOnFocus;
  ImGui::PushStyleVar(ImGuiStyleVar_WindowRounding, 0.0f);
  if (ImGui::Begin("##transport", nullptr, flags)) draw_transport(state_);
  ImGui::End();
  ImGui::PopStyleVar();
}

void UiShell::place(ImVec2 pos, ImVec2 size) {
  const ImGuiCond cond = layout_dirty_ ? ImGuiCond_Always : ImGuiCond_FirstUseEver;
  ImGui::SetNextWindowPos(pos, cond);
  ImGui::SetNextWindowSize(size, cond);
}

void UiShell::draw_panels() {
  // The workspace's layout; panels shown from the View menu outside it float over it, each at
  // its legible minimum or half the area, whichever is larger.
  const ImVec2 display = ImGui::GetIO().DisplaySize;
  const float top =
      menu_height_ + ImGui::GetFrameHeight() + ImGui::GetStyle().WindowPadding.y * 2.0f;
  const float m = kLayoutMargin;
  const ImVec2 area = panel_area();
  const float w = area.x, h = area.y;
  const Layout& layout = layout_of(workspace_, layout_);
  int cascade = 0;
  for (const std::unique_ptr<Panel>& panel : panels_) {
    Panel& p = *panel;
    if (!p.visible) continue;
    if (const Slot* s = find_slot(layout, p.title())) {
      const ImVec2 pos(std::floor(m + s->x * w), std::floor(top + m + s->y * h));
      const ImVec2 size(std::floor(s->w * w - m), std::floor(s->h * h - m));
      place(pos, size);
    } else {
      const LegibleMinimum min = legible_minimum(p.title());
      const ImGuiStyle& style = ImGui::GetStyle();
      const ImVec2 size(
          std::min(w - m, std::max(w * 0.5f,
                                   min.ems * ImGui::GetFontSize() + style.WindowPadding.x * 2.0f)),
          std::min(h - m,
                   std::max(h * 0.6f, min.lines * ImGui::GetTextLineHeightWithSpacing() +
                                          ImGui::GetFrameHeight() + style.WindowPadding.y * 2.0f)));
      const float step = ImGui::GetFrameHeight() * 1.5f;
      const ImVec2 pos(std::min(m + step * static_cast<float>(cascade), display.x - size.x),
                       std::min(top + m + step * static_cast<float>(cascade), top + h - size.y));
      ++cascade;
      place(pos, size);
    }
    // The shown title may change (a model name); the ID after "###" stays the panel's title.
    if (ImGui::Begin(panel_window_name(p, state_).c_str(), &p.visible,
                     ImGuiWindowFlags_NoCollapse)) {
      help_marker(p.help(), p.docs_page());
      ImGui::SameLine();
      p.draw(state_);
    }
    ImGui::End();
  }
}

namespace {

// The bar under the panels (presenter captions, or the attach status): full width, square
// corners, tinted with the accent. Call end_bottom_bar() after it whatever it returns.
bool begin_bottom_bar(const char* id, float height, bool presenter) {
  const ImVec2 display = ImGui::GetIO().DisplaySize;
  ImGui::SetNextWindowPos(ImVec2(0, display.y - height));
  ImGui::SetNextWindowSize(ImVec2(display.x, height));
  const ImGuiWindowFlags flags = ImGuiWindowFlags_NoDecoration | ImGuiWindowFlags_NoMove |
                                 ImGuiWindowFlags_NoSavedSettings |
                                 ImGuiWindowFlags_NoBringToFrontOnFocus;
  const Palette& pal = palette(presenter);
  ImGui::PushStyleVar(ImGuiStyleVar_WindowRounding, 0.0f);
  ImGui::PushStyleColor(ImGuiCol_WindowBg, mix_color(pal.panel_bg, pal.accent, 0.12f));
  return ImGui::Begin(id, nullptr, flags);
}

void end_bottom_bar() {
  ImGui::End();
  ImGui::PopStyleColor();
  ImGui::PopStyleVar();
}

}  // namespace

float UiShell::caption_bar_height() const {
  if (state_.source().attach_feed())
    return ImGui::GetTextLineHeightWithSpacing() + ImGui::GetStyle().WindowPadding.y * 2.0f;
  if (captions_of(state_) == nullptr) return 0.0f;
  return ImGui::GetTextLineHeightWithSpacing() * 2.0f + ImGui::GetStyle().WindowPadding.y * 2.0f;
}

void UiShell::draw_attach_bar(const AttachFeed& feed) {
  const std::shared_ptr<const AttachSnapshot> snap = feed.snapshot();
  attach_status_ = attach_status_text(*snap);
  const Palette& pal = palette(state_.presenter);
  if (begin_bottom_bar("##attach_status", caption_bar_height(), state_.presenter)) {
    // A dot: green while batches flow, amber while waiting or idle, grey once detached.
    const ImU32 dot = snap->stopped           ? pal.text_dim
                      : attach_flowing(*snap) ? series_color(2)
                                              : pal.warn;
    const float r = ImGui::GetFontSize() * 0.3f;
    const ImVec2 p = ImGui::GetCursorScreenPos();
    ImGui::GetWindowDrawList()->AddCircleFilled(
        ImVec2(p.x + r, p.y + ImGui::GetTextLineHeight() * 0.5f), r, dot);
    ImGui::Dummy(ImVec2(r * 2.0f, ImGui::GetTextLineHeight()));
    ImGui::SameLine(0, 8);
    ImGui::TextUnformatted(attach_status_.c_str());
    if (ImGui::IsItemHovered()) {
      ImGui::BeginTooltip();
      ImGui::TextUnformatted(snap->status_line.c_str());
      ImGui::TextDisabled("Live attach panel (Ctrl+5) for the details; docs/attach.md");
      ImGui::EndTooltip();
    }
  }
  end_bottom_bar();
}

int UiShell::workspace_of_key(std::string_view key) {
  static constexpr std::string_view kKeys[] = {"pool", "prefix", "attention", "compare",
                                               "live", "kernel", "serving"};
  for (int w = 0; w < static_cast<int>(std::size(kKeys)) && w < num_workspaces(); ++w)
    if (key == kKeys[w]) return w;
  return -1;
}

int UiShell::num_captions() const {
  const std::vector<Caption>* captions = captions_of(state_);
  return captions == nullptr ? 0 : static_cast<int>(captions->size());
}

namespace {

// What captions [0, index] leave in force: the last variant, compare target and workspace each
// names, so a caption reached directly (--caption N, PageUp) shows the view it was written in.
// Before the first caption that names a run variant the run plays "base" (so stepping back from
// a caption on another variant comes back to the base); the compare target and the workspace,
// until one names them, stay as the user chose.
struct ViewInForce {
  std::optional<std::string> run, compare, workspace;
};

ViewInForce view_in_force(const std::vector<Caption>& captions, int index) {
  ViewInForce out;
  bool names_run = false;
  for (std::size_t i = 0; i < captions.size(); ++i) {
    const CaptionView& v = captions[i].view;
    names_run = names_run || v.variant.has_value();
    if (static_cast<int>(i) > index) continue;
    if (v.variant) out.run = *v.variant;
    if (v.compare) out.compare = *v.compare;
    if (v.workspace) out.workspace = *v.workspace;
  }
  if (names_run && !out.run) out.run = "base";
  return out;
}

// A variant name as PolicyOverride spells it ("" for the base).
std::string override_variant(const std::string& name) {
  return name == "base" ? "" : name;
}

}  // namespace

bool UiShell::go_to_caption(int index) {
  const std::vector<Caption>* captions = captions_of(state_);
  if (captions == nullptr || index < 0 || index >= static_cast<int>(captions->size())) return false;
  pending_caption_ = index;
  caption_restarted_ = false;
  return apply_pending_caption();
}

bool UiShell::apply_pending_caption() {
  if (pending_caption_ < 0) return false;
  const std::vector<Caption>* captions = captions_of(state_);
  if (captions == nullptr || pending_caption_ >= static_cast<int>(captions->size())) {
    pending_caption_ = -1;
    return false;
  }
  const Caption& c = (*captions)[static_cast<std::size_t>(pending_caption_)];
  const ViewInForce cv = view_in_force(*captions, pending_caption_);
  const std::shared_ptr<const RunInfo> info = state_.source().run_info();
  if (cv.run && info && info->override.variant != override_variant(*cv.run)) {
    // The caption was written for another variant: re-run the scenario on it (once; a run that
    // fails to open shows its error and the caption is dropped), then land on its step.
    if (caption_restarted_) {
      // Requested: the restart happens at the end of a frame. Once it was handled, a run still
      // on another variant means it failed to open (its error is shown): the caption is dropped.
      if (!state_.restart_request && !opening()) pending_caption_ = -1;
      return false;
    }
    PolicyOverride policy;
    policy.variant = override_variant(*cv.run);
    policy.backend = info->override.backend;
    state_.restart_request = policy;
    caption_restarted_ = true;
    return false;
  }
  // Not computed yet: tried again next frame. A finished run shorter than the caption's step
  // shows its last step.
  if (c.step >= state_.num_steps() && state_.is_live()) return false;
  pending_caption_ = -1;
  state_.playing = false;  // the presenter drives: the view holds at the caption's moment
  state_.set_step(c.step);
  const CaptionView& v = c.view;
  if (cv.workspace) {
    if (const int w = workspace_of_key(*cv.workspace); w >= 0) set_workspace(w);
  }
  if (v.layer || v.head || v.sink_grid)
    state_.attention_focus = AppState::AttentionFocus{v.layer, v.head, v.sink_grid};
  if (v.compare_tab) state_.compare_tab = *v.compare_tab == "text" ? 1 : 0;
  if (cv.compare) {
    PolicyOverride target;
    target.variant = override_variant(*cv.compare);
    if (!(state_.compare_variant == target) || state_.compare_variant_version == 0) {
      state_.compare_variant = target;
      ++state_.compare_variant_version;
    }
  }
  return true;
}

void UiShell::draw_caption_bar() {
  if (const std::shared_ptr<AttachFeed> feed = state_.source().attach_feed()) {
    draw_attach_bar(*feed);
    return;
  }
  attach_status_.clear();
  const std::vector<Caption>* captions = captions_of(state_);
  if (captions == nullptr) return;
  const int step = state_.step();
  // The caption in force: the last one whose step is at or before the selected step.
  int current = -1;
  for (int i = 0; i < static_cast<int>(captions->size()); ++i) {
    if ((*captions)[static_cast<std::size_t>(i)].step <= step) current = i;
  }
  const ImGuiIO& io = ImGui::GetIO();
  if (!io.WantTextInput) {
    int target = -1;
    if (key_pressed(ImGuiKey_PageDown) && current + 1 < static_cast<int>(captions->size()))
      target = current + 1;
    // PageUp: back to the start of the current caption, or to the previous one when already there.
    if (key_pressed(ImGuiKey_PageUp) && current >= 0)
      target = (*captions)[static_cast<std::size_t>(current)].step < step || current == 0
                   ? current
                   : current - 1;
    if (target >= 0) go_to_caption(target);
  }
  const ImVec2 display = io.DisplaySize;
  const Palette& pal = palette(state_.presenter);
  if (begin_bottom_bar("##captions", caption_bar_height(), state_.presenter)) {
    const int n = static_cast<int>(captions->size());
    ImGui::TextColored(ImGui::ColorConvertU32ToFloat4(pal.accent), "%d/%d", current + 1, n);
    item_tooltip("Presenter captions from the scenario file",
                 "PageDown / PageUp: next / previous caption");
    ImGui::SameLine(0, 16);
    if (current < 0) {
      const Caption& first = captions->front();
      ImGui::TextDisabled("First caption at step %d (PageDown to jump there)", first.step);
    } else {
      const Caption& c = (*captions)[static_cast<std::size_t>(current)];
      ImGui::PushTextWrapPos(display.x - 16.0f);
      ImGui::TextWrapped("Step %d: %s", c.step, c.text.c_str());
      ImGui::PopTextWrapPos();
    }
  }
  end_bottom_bar();
}

void UiShell::draw_help_window() {
  if (!show_help_) return;
  const ImVec2 display = ImGui::GetIO().DisplaySize;
  ImGui::SetNextWindowPos(ImVec2(display.x * 0.5f, display.y * 0.5f), ImGuiCond_Appearing,
                          ImVec2(0.5f, 0.5f));
  ImGui::SetNextWindowSize(ImVec2(std::min(display.x * 0.8f, ImGui::GetFontSize() * 46.0f), 0.0f),
                           ImGuiCond_Appearing);
  if (ImGui::Begin("kvscope help", &show_help_, ImGuiWindowFlags_NoCollapse)) {
    static const char* const kKeys[][2] = {
        {"Space", "play / pause"},
        {"Left / Right", "step back / forward (Shift: 10)"},
        {"Home / End", "first / last step"},
        {"PageDown / PageUp", "next / previous presenter caption"},
        {"F1", "this help"},
        {"F11", "full screen"},
        {"F12", "save a screenshot (PNG)"},
        {"P", "presenter mode"},
        {"Ctrl+O", "open a scenario or recording"},
        {"Ctrl+S", "save the recording (.kvr)"},
        {"Ctrl+E", "export the per-step metrics (CSV)"},
        {"Ctrl+Shift+A", "attach to a live vLLM / SGLang engine"},
        {"Ctrl+R", "restart the scenario"},
        {"Ctrl+1..7",
         "workspace: pool, prefix, attention & quality, compare, live, kernel, serving"},
        {"View > panel", "a panel this window size leaves out (it floats over the layout)"},
        {"Ctrl+Q", "quit"}};
    if (ImGui::BeginTable("##keys", 2, ImGuiTableFlags_SizingFixedFit)) {
      for (const auto& k : kKeys) {
#if defined(__EMSCRIPTEN__)  // neither is the page's (the tab is the browser's to close)
        if (std::string_view(k[0]) == "Ctrl+Shift+A" || std::string_view(k[0]) == "Ctrl+Q")
          continue;
#endif
        ImGui::TableNextColumn();
        ImGui::TextColored(ImGui::ColorConvertU32ToFloat4(palette(state_.presenter).accent), "%s",
                           k[0]);
        ImGui::TableNextColumn();
        ImGui::TextUnformatted(k[1]);
      }
      ImGui::EndTable();
    }
    ImGui::Separator();
    ImGui::PushTextWrapPos(0.0f);
    for (const auto& p : panels_) {
      ImGui::TextUnformatted(p->title());
      ImGui::TextDisabled("%s  (%s)", p->help().c_str(), p->docs_page());
      ImGui::Spacing();
    }
    ImGui::PopTextWrapPos();
  }
  ImGui::End();
}

void UiShell::draw_error_modal() {
  if (error_pending_) {
    ImGui::OpenPopup("Error");
    error_pending_ = false;
  }
  ImGui::SetNextWindowSize(ImVec2(ImGui::GetFontSize() * 34.0f, 0.0f), ImGuiCond_Appearing);
  if (ImGui::BeginPopupModal("Error", nullptr, ImGuiWindowFlags_NoResize)) {
    ImGui::PushTextWrapPos(0.0f);
    ImGui::TextUnformatted(error_.c_str());
    ImGui::PopTextWrapPos();
    ImGui::TextDisabled("What was loaded before stays loaded.");
    if (ImGui::Button("OK", ImVec2(120, 0))) ImGui::CloseCurrentPopup();
    ImGui::EndPopup();
  }
}

}  // namespace kvscope::ui
