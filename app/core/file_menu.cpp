// FileMenu: File menu items and the path popup.
#include "app/core/file_menu.h"

#include <imgui.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "app/widgets/widgets.h"
#if defined(__EMSCRIPTEN__)
#include "app/web/web_page.h"
#endif

namespace kvscope::ui {

namespace {

constexpr const char* kPopup = "Path##file";
constexpr const char* kAttachPopup = "Attach to a live engine##attach";

const char* prompt_for(FileAction::Kind kind) {
  switch (kind) {
    case FileAction::Kind::kOpen:
      return "Open a scenario (.json), a recording (.kvr) or an eval sweep (.csv):";
    case FileAction::Kind::kSaveRecording:
      return "Save the recording (.kvr) to:";
    case FileAction::Kind::kExportCsv:
      return "Export per-step metrics (CSV) to:";
    default:
      return "";
  }
}

std::string stem_of(const std::string& path) {
  const std::string stem = std::filesystem::path(path).stem().string();
  return stem.empty() ? "kvscope" : stem;
}

}  // namespace

void FileMenu::ask_or_pick(FileAction::Kind kind, const std::string& loaded) {
#if defined(__EMSCRIPTEN__)
  // In the browser the page's file system is the tab's: a file comes from the browser's picker
  // and a written one leaves as a download (app/web/web_page.h).
  if (kind == FileAction::Kind::kOpen)
    web_pick_file();
  else
    direct_ = FileAction{kind, web_download_path(default_name(kind, loaded)), {}};
#else
  ask(kind, default_name(kind, loaded));
#endif
}

std::string FileMenu::default_name(FileAction::Kind kind, const std::string& loaded) {
  if (kind == FileAction::Kind::kSaveRecording) return stem_of(loaded) + ".kvr";
  if (kind == FileAction::Kind::kExportCsv) return stem_of(loaded) + "-metrics.csv";
  return loaded;
}

void FileMenu::ask(FileAction::Kind kind, const std::string& initial) {
  asking_ = kind;
  std::snprintf(path_, sizeof path_, "%s", initial.c_str());
  popup_pending_ = true;
  focus_input_ = true;
}

namespace {

// Where recent.txt lives ("" when no home is known: nothing is kept).
std::string config_dir() {
  if (const char* d = std::getenv("KVSCOPE_CONFIG_DIR"); d != nullptr && *d != '\0') return d;
  if (const char* x = std::getenv("XDG_CONFIG_HOME"); x != nullptr && *x != '\0')
    return std::string(x) + "/kvscope";
  if (const char* h = std::getenv("HOME"); h != nullptr && *h != '\0')
    return std::string(h) + "/.config/kvscope";
  return "";
}

constexpr std::size_t kMaxRecent = 8;

}  // namespace

void FileMenu::load_recent() {
  recent_read_ = true;
  const std::string dir = config_dir();
  if (dir.empty()) return;
  std::ifstream in(dir + "/recent.txt");
  for (std::string line; std::getline(in, line) && recent_.size() < kMaxRecent;)
    if (!line.empty()) recent_.push_back(line);
}

void FileMenu::save_recent() const {
  const std::string dir = config_dir();
  if (dir.empty()) return;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  std::ofstream out(dir + "/recent.txt", std::ios::trunc);
  for (const std::string& r : recent_) out << r << "\n";
}

void FileMenu::note_opened(const std::string& path) {
  if (!recent_read_) load_recent();
  std::error_code ec;
  const std::filesystem::path abs = std::filesystem::absolute(path, ec);
  const std::string p = ec ? path : abs.lexically_normal().string();
  recent_.erase(std::remove(recent_.begin(), recent_.end(), p), recent_.end());
  recent_.insert(recent_.begin(), p);
  if (recent_.size() > kMaxRecent) recent_.resize(kMaxRecent);
  save_recent();
}

void FileMenu::draw_items(const std::string& loaded, bool can_restart) {
  if (ImGui::BeginMenu("Open shipped scenario")) {
    if (!shipped_read_) {
      shipped_ = shipped_scenarios(std::string(KVSCOPE_SOURCE_DIR) + "/scenarios");
      shipped_read_ = true;
    }
    for (const ShippedScenario& sc : shipped_) {
      if (ImGui::MenuItem(sc.name.c_str(), nullptr, sc.path == loaded, sc.available))
        direct_ = FileAction{FileAction::Kind::kOpen, sc.path, {}};
      // Disabled items show their tooltip too: why they cannot be opened.
      if (ImGui::IsItemHovered(ImGuiHoveredFlags_AllowWhenDisabled)) {
        ImGui::BeginTooltip();
        ImGui::PushTextWrapPos(ImGui::GetFontSize() * 30.0f);
        ImGui::TextUnformatted(sc.title.empty() ? sc.path.c_str() : sc.title.c_str());
        if (!sc.available) ImGui::TextDisabled("%s", sc.why.c_str());
        ImGui::PopTextWrapPos();
        ImGui::EndTooltip();
      }
    }
    ImGui::EndMenu();
  }
  if (!recent_read_) load_recent();
  if (ImGui::BeginMenu("Open recent", !recent_.empty())) {
    for (const std::string& r : recent_) {
      if (ImGui::MenuItem(std::filesystem::path(r).filename().string().c_str(), nullptr,
                          r == loaded))
        direct_ = FileAction{FileAction::Kind::kOpen, r, {}};
      item_tooltip(r.c_str());
    }
    ImGui::EndMenu();
  }
  if (ImGui::MenuItem("Open scenario or recording...", "Ctrl+O"))
    ask_or_pick(FileAction::Kind::kOpen, loaded);
#if defined(__EMSCRIPTEN__)
  ImGui::MenuItem("Attach to a live engine...", "Ctrl+Shift+A", false, false);
  if (ImGui::IsItemHovered(ImGuiHoveredFlags_AllowWhenDisabled))
    ImGui::SetTooltip(
        "Not in the browser: a page cannot open the ZeroMQ sockets a live engine publishes on.\n"
        "The desktop build attaches (docs/attach.md).");
#else
  if (ImGui::MenuItem("Attach to a live engine...", "Ctrl+Shift+A")) ask_attach();
  item_tooltip("Follow the KV-cache event stream of a running vLLM or SGLang server (ZeroMQ)");
#endif
  if (ImGui::MenuItem("Restart scenario", "Ctrl+R", false, can_restart))
    direct_ = FileAction{FileAction::Kind::kRestart, {}, {}};
  item_tooltip("Runs the scenario again from step 0 (same seed: the same timeline)");
  ImGui::Separator();
  if (ImGui::MenuItem("Save recording...", "Ctrl+S"))
    ask_or_pick(FileAction::Kind::kSaveRecording, loaded);
#if defined(__EMSCRIPTEN__)
  item_tooltip(
      "Downloads the run's recording (.kvr): File > Open takes it back, here or in the "
      "desktop build");
#endif
  if (ImGui::MenuItem("Export metrics CSV...", "Ctrl+E"))
    ask_or_pick(FileAction::Kind::kExportCsv, loaded);
  item_tooltip(
#if defined(__EMSCRIPTEN__)
      "Downloads the run's per-step metrics (occupancy, fragmentation, requests, prefix hits) "
      "as CSV"
#else
      "Writes the run's per-step metrics (occupancy, fragmentation, requests, prefix hits) as "
      "CSV"
#endif
  );
  if (ImGui::MenuItem("Export screenshot", "F12"))
    direct_ = FileAction{FileAction::Kind::kScreenshot, {}, {}};
#if !defined(__EMSCRIPTEN__)  // a tab is closed by the browser
  ImGui::Separator();
  if (ImGui::MenuItem("Quit", "Ctrl+Q")) direct_ = FileAction{FileAction::Kind::kQuit, {}, {}};
#endif
}

std::optional<FileAction> FileMenu::take_direct() {
  std::optional<FileAction> a = std::move(direct_);
  direct_.reset();
  return a;
}

void FileMenu::ask_attach() {
  attach_pending_ = true;
}

std::optional<FileAction> FileMenu::draw_attach_dialog() {
  if (attach_pending_) {
    ImGui::OpenPopup(kAttachPopup);
    attach_pending_ = false;
    focus_input_ = true;
  }
  std::optional<FileAction> result;
  ImGui::SetNextWindowSize(ImVec2(ImGui::GetFontSize() * 40.0f, 0.0f), ImGuiCond_Appearing);
  if (!ImGui::BeginPopupModal(kAttachPopup, nullptr, ImGuiWindowFlags_NoResize)) return result;
  ImGui::PushTextWrapPos(0.0f);
  ImGui::TextDisabled(
      "Start vLLM or SGLang with --kv-events-config (docs/attach.md). No engine "
      "at hand: python3 tests/attach/publish.py --dp 2 --run-for 600 publishes a "
      "demo stream at these defaults (set DP ranks to 2).");
  ImGui::PopTextWrapPos();
  const float label_w = ImGui::GetFontSize() * 9.0f;
  auto label = [&](const char* text, const char* tip) {
    ImGui::AlignTextToFramePadding();
    ImGui::TextUnformatted(text);
    item_tooltip(tip);
    ImGui::SameLine(label_w);
    ImGui::SetNextItemWidth(-1.0f);
  };
  label("Publisher", "Rank 0's event socket (the engine's `endpoint`, with its host instead of *)");
  if (focus_input_) {
    ImGui::SetKeyboardFocusHere();
    focus_input_ = false;
  }
  const bool enter = ImGui::InputText("##endpoint", endpoint_, sizeof endpoint_,
                                      ImGuiInputTextFlags_EnterReturnsTrue);
  ImGui::Checkbox("Replay socket", &use_replay_);
  item_tooltip(
      "The engine's `replay_endpoint`: fetches what it buffered before attach and fills "
      "sequence gaps (without it, a missed batch stays missed)");
  ImGui::SameLine(label_w);
  ImGui::SetNextItemWidth(-1.0f);
  if (!use_replay_) ImGui::BeginDisabled();
  ImGui::InputText("##replay", replay_, sizeof replay_);
  if (!use_replay_) ImGui::EndDisabled();
  label("Topic", "Only batches on this topic (the engine's `topic`); empty: every topic");
  ImGui::InputText("##topic", topic_, sizeof topic_);
  label("DP ranks", "Data-parallel ranks: one publisher each, at port + rank");
  ImGui::InputInt("##dp", &dp_);
  label("Slots",
        "Live blocks this view holds (the block map's size); stores past it are counted, "
        "not shown");
  ImGui::InputInt("##slots", &slots_, 1024, 16384);
  ImGui::Checkbox("Bind (the engine connects to kvscope)", &bind_);
  item_tooltip(
      "For an engine whose `endpoint` names this machine (no *): it connects instead of "
      "binding, so kvscope listens at the publisher address (tcp://*:PORT is fine)");
  const bool ok = ImGui::Button("Attach", ImVec2(120, 0)) || enter;
  ImGui::SameLine();
  const bool cancel = ImGui::Button("Cancel", ImVec2(120, 0)) || key_pressed(ImGuiKey_Escape);
  if (ok && endpoint_[0] != '\0') {
    FileAction a{FileAction::Kind::kAttach, {}, {}};
    a.attach.endpoint = endpoint_;
    a.attach.replay = use_replay_ ? replay_ : "";
    a.attach.topic = topic_;
    a.attach.dp = dp_;
    a.attach.bind = bind_;
    a.attach.slots = slots_;
    result = std::move(a);
    ImGui::CloseCurrentPopup();
  } else if (cancel) {
    ImGui::CloseCurrentPopup();
  }
  ImGui::EndPopup();
  return result;
}

std::optional<FileAction> FileMenu::draw_popup(const std::string& loaded) {
  const ImGuiIO& io = ImGui::GetIO();
#if !defined(__EMSCRIPTEN__)
  if (!io.WantTextInput && io.KeyCtrl && io.KeyShift && ImGui::IsKeyPressed('A')) ask_attach();
#endif
  if (!io.WantTextInput && io.KeyCtrl && ImGui::IsKeyPressed('O'))  // GLFW key codes are ASCII
    ask_or_pick(FileAction::Kind::kOpen, path_);
  if (!io.WantTextInput && io.KeyCtrl && !io.KeyShift && ImGui::IsKeyPressed('S'))
    ask_or_pick(FileAction::Kind::kSaveRecording, loaded);
  if (!io.WantTextInput && io.KeyCtrl && !io.KeyShift && ImGui::IsKeyPressed('E'))
    ask_or_pick(FileAction::Kind::kExportCsv, loaded);
  if (std::optional<FileAction> a = draw_attach_dialog()) return a;
  if (popup_pending_) {
    ImGui::OpenPopup(kPopup);
    popup_pending_ = false;
  }
  std::optional<FileAction> result;
  ImGui::SetNextWindowSize(ImVec2(ImGui::GetFontSize() * 36.0f, 0.0f), ImGuiCond_Appearing);
  if (ImGui::BeginPopupModal(kPopup, nullptr, ImGuiWindowFlags_NoResize)) {
    ImGui::TextUnformatted(prompt_for(asking_));
    if (focus_input_) {
      ImGui::SetKeyboardFocusHere();
      focus_input_ = false;
    }
    ImGui::SetNextItemWidth(-1.0f);
    const bool enter =
        ImGui::InputText("##path", path_, sizeof path_, ImGuiInputTextFlags_EnterReturnsTrue);
    ImGui::TextDisabled("Relative paths start at %s",
                        std::filesystem::current_path().string().c_str());
    const bool ok = ImGui::Button("OK", ImVec2(120, 0)) || enter;
    ImGui::SameLine();
    const bool cancel = ImGui::Button("Cancel", ImVec2(120, 0)) || key_pressed(ImGuiKey_Escape);
    if (ok && path_[0] != '\0') {
      result = FileAction{asking_, path_, {}};
      ImGui::CloseCurrentPopup();
    } else if (cancel) {
      ImGui::CloseCurrentPopup();
    }
    ImGui::EndPopup();
  }
  return result;
}

}  // namespace kvscope::ui
