// FileMenu: File menu items and the path popup.
#include "app/core/file_menu.h"

#include <imgui.h>

#include <cstdio>
#include <filesystem>

#include "app/widgets/widgets.h"

namespace kvscope::ui {

namespace {

constexpr const char* kPopup = "Path##file";
constexpr const char* kAttachPopup = "Attach to a live engine##attach";

const char* prompt_for(FileAction::Kind kind) {
  switch (kind) {
    case FileAction::Kind::kOpen:
      return "Open a scenario (.json) or a recording (.kvr):";
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

void FileMenu::ask(FileAction::Kind kind, const std::string& initial) {
  asking_ = kind;
  std::snprintf(path_, sizeof path_, "%s", initial.c_str());
  popup_pending_ = true;
  focus_input_ = true;
}

void FileMenu::draw_items(const std::string& loaded, bool can_restart) {
  if (ImGui::MenuItem("Open scenario or recording...", "Ctrl+O"))
    ask(FileAction::Kind::kOpen, loaded);
  if (ImGui::MenuItem("Attach to a live engine...", "Ctrl+Shift+A")) ask_attach();
  item_tooltip("Follow the KV-cache event stream of a running vLLM or SGLang server (ZeroMQ)");
  if (ImGui::MenuItem("Restart scenario", "Ctrl+R", false, can_restart))
    direct_ = FileAction{FileAction::Kind::kRestart, {}, {}};
  item_tooltip("Runs the scenario again from step 0 (same seed: the same timeline)");
  ImGui::Separator();
  if (ImGui::MenuItem("Save recording..."))
    ask(FileAction::Kind::kSaveRecording, stem_of(loaded) + ".kvr");
  if (ImGui::MenuItem("Export metrics CSV..."))
    ask(FileAction::Kind::kExportCsv, stem_of(loaded) + "-metrics.csv");
  if (ImGui::MenuItem("Export screenshot", "F12"))
    direct_ = FileAction{FileAction::Kind::kScreenshot, {}, {}};
  ImGui::Separator();
  if (ImGui::MenuItem("Quit", "Ctrl+Q")) direct_ = FileAction{FileAction::Kind::kQuit, {}, {}};
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

std::optional<FileAction> FileMenu::draw_popup() {
  const ImGuiIO& io = ImGui::GetIO();
  if (!io.WantTextInput && io.KeyCtrl && io.KeyShift && ImGui::IsKeyPressed('A')) ask_attach();
  if (!io.WantTextInput && io.KeyCtrl && ImGui::IsKeyPressed('O'))  // GLFW key codes are ASCII
    ask(FileAction::Kind::kOpen, path_);
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
