// See web_page.h. Built into the browser build only (app/web/web.cmake).
#include "app/web/web_page.h"

#include <emscripten/emscripten.h>

#include <filesystem>

#include "app/core/scenario_catalog.h"
#include "app/core/shell.h"

namespace kvscope::ui {
namespace {

UiShell* g_shell = nullptr;

}  // namespace

void web_set_shell(UiShell* shell) {
  g_shell = shell;
}

void web_report_failure(const std::string& what) {
  web_fail("internal error (a bug in kvscope; please report it): " + what);
}

void web_fail(const std::string& why) {
  emscripten_cancel_main_loop();
  EM_ASM({ kvscopeFail(UTF8ToString($0)); }, why.c_str());  // app/web/shell.html
}

void web_status(const std::string& text) {
  EM_ASM({ Module.setStatus(UTF8ToString($0)); }, text.c_str());  // app/web/shell.html
}

void web_offer_download(const std::string& path) {
  EM_ASM({ kvscopeDownload(UTF8ToString($0)); }, path.c_str());  // app/web/shell.html
}

std::string web_download_path(const std::string& name) {
  const std::filesystem::path dir = "/downloads";
  std::filesystem::create_directories(dir);
  return (dir / std::filesystem::path(name).filename()).string();
}

void web_pick_file() {
  EM_ASM({ kvscopePickFile(); });  // app/web/shell.html
}

}  // namespace kvscope::ui

// The page's "Open file" (and its test): `path` is a file the page wrote into the module's file
// system. 1 when the shell opened it; 0 when it showed why not (an error modal, as File > Open).
extern "C" EMSCRIPTEN_KEEPALIVE int kvscope_web_open(const char* path) {
  if (kvscope::ui::g_shell == nullptr) return 0;
  return kvscope::ui::g_shell->open(path) ? 1 : 0;
}

// The page's "Open file" with a model: `name` is now in /shared/models, where the engine looks.
// When it makes another scenario the first one (SmolLM2's file: the SmolLM2 chat, as the desktop
// build opens with it on disk), that scenario opens (1); otherwise the status line says where the
// model is offered (0).
extern "C" EMSCRIPTEN_KEEPALIVE int kvscope_web_model_added(const char* name) {
  kvscope::ui::UiShell* shell = kvscope::ui::g_shell;
  if (shell == nullptr) return 0;
  const std::string first =
      kvscope::ui::default_scenario(std::string(KVSCOPE_SOURCE_DIR) + "/scenarios");
  if (shell->session() == nullptr || shell->session()->path() != first) {
    if (first.find("smollm2") != std::string::npos) return shell->open(first) ? 1 : 0;
  }
  shell->set_status(std::string("added ") + name +
                    ": choose it in the Controls panel's model picker");
  return 0;
}
