// FileMenu: File menu items and the path popup.
#include "app/core/file_menu.h"

#include <imgui.h>

#include <cstdio>
#include <filesystem>

#include "app/widgets/widgets.h"

namespace kvscope::ui {

namespace {

constexpr const char* kPopup = "Path##file";

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
  if (ImGui::MenuItem("Restart scenario", "Ctrl+R", false, can_restart))
    direct_ = FileAction{FileAction::Kind::kRestart, {}};
  item_tooltip("Runs the scenario again from step 0 (same seed: the same timeline)");
  ImGui::Separator();
  if (ImGui::MenuItem("Save recording..."))
    ask(FileAction::Kind::kSaveRecording, stem_of(loaded) + ".kvr");
  if (ImGui::MenuItem("Export metrics CSV..."))
    ask(FileAction::Kind::kExportCsv, stem_of(loaded) + "-metrics.csv");
  if (ImGui::MenuItem("Export screenshot", "F12"))
    direct_ = FileAction{FileAction::Kind::kScreenshot, {}};
  ImGui::Separator();
  if (ImGui::MenuItem("Quit", "Ctrl+Q")) direct_ = FileAction{FileAction::Kind::kQuit, {}};
}

std::optional<FileAction> FileMenu::take_direct() {
  std::optional<FileAction> a = std::move(direct_);
  direct_.reset();
  return a;
}

std::optional<FileAction> FileMenu::draw_popup() {
  const ImGuiIO& io = ImGui::GetIO();
  if (!io.WantTextInput && io.KeyCtrl && ImGui::IsKeyPressed('O'))  // GLFW key codes are ASCII
    ask(FileAction::Kind::kOpen, path_);
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
      result = FileAction{asking_, path_};
      ImGui::CloseCurrentPopup();
    } else if (cancel) {
      ImGui::CloseCurrentPopup();
    }
    ImGui::EndPopup();
  }
  return result;
}

}  // namespace kvscope::ui
