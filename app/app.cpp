// kvscope-ui main loop: window and GL context, platform shortcuts (F1, F11, F12, P, Ctrl+Q),
// fullscreen, screenshots, and the no-display fallback (exit code 3).
#include "app/app.h"

#include <GLFW/glfw3.h>
#include <backends/imgui_impl_glfw.h>
#include <backends/imgui_impl_opengl3.h>
#include <imgui.h>

#include <cfloat>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>

#if defined(__EMSCRIPTEN__)
#include <emscripten/emscripten.h>
#include <emscripten/html5.h>

#include "app/web/web_page.h"
#endif

#include "app/core/key_queue.h"
#include "app/core/run_session.h"
#include "app/core/shell.h"
#include "app/renderer.h"
#include "app/screenshot.h"
#include "engine/common/error.h"

namespace kvscope::ui {

namespace {

constexpr double kMaxCaptureWaitSeconds = 300.0;  // then the screenshot is taken regardless

// The shaders' GLSL: desktop OpenGL 3.0, or WebGL 2 (OpenGL ES 3.0) in the browser build.
#if defined(__EMSCRIPTEN__)
constexpr const char* kGlslVersion = "#version 300 es";
#else
constexpr const char* kGlslVersion = "#version 130";
#endif

std::string g_glfw_error = "unknown error";  // the GLFW error callback has no user pointer

void on_glfw_error(int code, const char* description) {
  g_glfw_error =
      std::string(description ? description : "?") + " (code " + std::to_string(code) + ")";
}

// The window's key events, handed to ImGui's backend a frame at a time (key_queue.h: a tap
// between two frames is not lost). One window; GLFW's callback has no user pointer.
KeyQueue g_keys;

void on_key(GLFWwindow* /*window*/, int key, int scancode, int action, int mods) {
  g_keys.push(KeyEvent{key, scancode, action, mods});
}

std::string timestamped_png_name() {
  char buf[64];
  const std::time_t now = std::time(nullptr);
  std::strftime(buf, sizeof buf, "kvscope-%Y%m%d-%H%M%S.png", std::localtime(&now));
  return buf;
}

struct WindowedGeometry {
  int x = 100, y = 100, w = 1600, h = 1000;
};

void toggle_fullscreen(GLFWwindow* window, WindowedGeometry& saved) {
  if (glfwGetWindowMonitor(window) != nullptr) {
    glfwSetWindowMonitor(window, nullptr, saved.x, saved.y, saved.w, saved.h, 0);
    return;
  }
  GLFWmonitor* monitor = glfwGetPrimaryMonitor();
  const GLFWvidmode* mode = monitor ? glfwGetVideoMode(monitor) : nullptr;
  if (mode == nullptr) return;
  glfwGetWindowPos(window, &saved.x, &saved.y);
  glfwGetWindowSize(window, &saved.w, &saved.h);
  glfwSetWindowMonitor(window, monitor, 0, 0, mode->width, mode->height, mode->refreshRate);
}

// The first run's policy: the scenario's own, on the backend --backend names.
PolicyOverride initial_policy(const AppOptions& options) {
  PolicyOverride p;
  if (!options.backend.empty() && options.backend != "cpu") p.backend.emplace(options.backend);
  return p;
}

// The window with its OpenGL 3.0 context; null (with the message printed and GLFW shut down)
// when there is no display.
GLFWwindow* open_window(const AppOptions& options) {
  glfwSetErrorCallback(on_glfw_error);
  if (!glfwInit()) {
    std::fprintf(stderr,
                 "kvscope-ui: no display available (GLFW: %s); use the headless CLI instead\n",
                 g_glfw_error.c_str());
    return nullptr;
  }
  glfwWindowHint(GLFW_CONTEXT_VERSION_MAJOR, 3);
  glfwWindowHint(GLFW_CONTEXT_VERSION_MINOR, 0);
#ifdef __EMSCRIPTEN__
  // Dear ImGui draws with neither a depth nor a stencil buffer, and the page shows the canvas
  // opaque: without them the browser keeps, clears and composites less each frame.
  glfwWindowHint(GLFW_ALPHA_BITS, 0);
  glfwWindowHint(GLFW_DEPTH_BITS, 0);
  glfwWindowHint(GLFW_STENCIL_BITS, 0);
#endif
  GLFWwindow* window = glfwCreateWindow(options.width, options.height, "kvscope", nullptr, nullptr);
  if (window == nullptr) {
    std::fprintf(stderr,
                 "kvscope-ui: no display available (cannot open an OpenGL 3.0 window: %s); "
                 "use the headless CLI instead\n",
                 g_glfw_error.c_str());
    glfwTerminate();
    return nullptr;
  }
  glfwMakeContextCurrent(window);
  glfwSwapInterval(options.screenshot.empty() ? 1 : 0);
  return window;
}

// The shell as the options open it: presenter mode, workspace, a screenshot's step, a caption.
// False (with the message printed) when --caption names a caption the run does not have.
bool prepare_shell(UiShell& shell, const AppOptions& options, bool capture, bool live) {
  if (options.presenter) shell.set_presenter(true);
  shell.set_workspace(live && !options.workspace_given ? UiShell::kLiveWorkspace
                                                       : options.workspace);
  if (capture && !live) {
    shell.state().playing = false;
    shell.state().set_step(options.step >= 0 ? options.step : shell.state().num_steps() / 2);
  }
  // --caption N: the shell applies it once its step (and its variant's run) is there.
  if (options.caption > 0 && options.caption > shell.num_captions()) {
    std::fprintf(stderr, "kvscope-ui: --caption: expected 1 to %d (the captions of %s), got %d\n",
                 shell.num_captions(), options.input.c_str(), options.caption);
    return false;
  }
  if (options.caption > 0) shell.go_to_caption(options.caption - 1);
  return true;
}

// The window's frames until it closes (or a --screenshot is written): keys, the shell's frame,
// drawing, and screenshots.
class FrameLoop {
 public:
  FrameLoop(GLFWwindow* window, const AppOptions& options, UiShell& shell, bool live)
      : window_(window),
        options_(options),
        shell_(shell),
        io_(ImGui::GetIO()),
        capture_(!options.screenshot.empty()),
        live_(live),
        last_(glfwGetTime()),
        renderer_(options.imgui_renderer ? nullptr : make_renderer()) {}

  // kvscope's renderer, or null (ImGui's backend draws) if the driver refuses its shaders: the
  // window still shows the run, and the reason is on stderr.
  static std::unique_ptr<DrawRenderer> make_renderer() {
    try {
      return std::make_unique<DrawRenderer>();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "kvscope-ui: %s; drawing with Dear ImGui's OpenGL3 backend instead\n",
                   e.what());
      return nullptr;
    }
  }

  // The exit code: 0, or 1 when the --screenshot could not be written.
  int run() {
    for (int frame = 0; !glfwWindowShouldClose(window_); ++frame) {
      if (!frame_once(frame)) break;
    }
    return exit_code_;
  }

  // One frame; false when the loop ends after it (a --screenshot written).
  bool frame_once(int frame) {
    glfwPollEvents();
    const double now = glfwGetTime();
    const double dt = capture_ && !live_ ? 1.0 / 60.0 : now - last_;
    if (capture_ && live_) std::this_thread::sleep_for(std::chrono::milliseconds(33));
    last_ = now;
    draw(dt);
    if (capture_ && frame + 1 >= options_.frames && capture_done(frame)) return false;
    if (want_screenshot_) save_requested();
    glfwSwapBuffers(window_);
    return true;
  }

#if defined(__EMSCRIPTEN__)
  // The browser's event loop calls this once per animation frame. The canvas follows the page's
  // size (the page styles it to fill the tab).
  static void browser_frame(void* self) {
    auto* loop = static_cast<FrameLoop*>(self);
    double css_w = 0.0, css_h = 0.0;
    if (emscripten_get_element_css_size("#canvas", &css_w, &css_h) == EMSCRIPTEN_RESULT_SUCCESS) {
      int w = 0, h = 0;
      glfwGetWindowSize(loop->window_, &w, &h);
      if (static_cast<int>(css_w) != w || static_cast<int>(css_h) != h)
        glfwSetWindowSize(loop->window_, static_cast<int>(css_w), static_cast<int>(css_h));
    }
    try {
      loop->frame_once(loop->frames_++);
    } catch (const std::exception& e) {
      web_report_failure(e.what());
    }
  }
#endif

 private:
  void keys() {
    if (io_.WantTextInput) return;
    if (ImGui::IsKeyPressed(GLFW_KEY_F1)) shell_.toggle_help();
    if (ImGui::IsKeyPressed(GLFW_KEY_F11)) toggle_fullscreen(window_, saved_);
    if (ImGui::IsKeyPressed(GLFW_KEY_F12)) want_screenshot_ = true;
    if (ImGui::IsKeyPressed(GLFW_KEY_P) && !io_.KeyCtrl)
      shell_.set_presenter(!shell_.state().presenter);
    if (ImGui::IsKeyPressed(GLFW_KEY_Q) && io_.KeyCtrl) glfwSetWindowShouldClose(window_, 1);
  }

  // "kvscope: minimal.json step 12/40": the window's title, and the browser tab's (where the
  // browser build's test reads it, tests/web/web_test.py).
  void update_title() {
    const AppState& state = shell_.state();
    const RunSession* session = shell_.session();
    const std::string name =
        session != nullptr ? std::filesystem::path(session->path()).filename().string() : "demo";
    // The transport's numbers: the step shown and the last one.
    const std::string title = "kvscope: " + name + " step " + std::to_string(state.step()) + "/" +
                              std::to_string(state.num_steps() - 1);
    if (title == title_) return;
    title_ = title;
    glfwSetWindowTitle(window_, title_.c_str());
  }

  void draw(double dt) {
    ImGui_ImplOpenGL3_NewFrame();
    g_keys.deliver([this](const KeyEvent& e) {
      ImGui_ImplGlfw_KeyCallback(window_, e.key, e.scancode, e.action, e.mods);
    });
    ImGui_ImplGlfw_NewFrame();
    if (capture_) io_.MousePos = ImVec2(-FLT_MAX, -FLT_MAX);  // no hover in screenshots
    ImGui::NewFrame();
    keys();
    shell_.set_fullscreen_flag(glfwGetWindowMonitor(window_) != nullptr);
    shell_.frame(dt);
    update_title();
    const ShellRequests req = shell_.take_requests();
    if (req.quit) glfwSetWindowShouldClose(window_, 1);
    if (req.toggle_fullscreen) toggle_fullscreen(window_, saved_);
    want_screenshot_ = want_screenshot_ || req.screenshot;
    ImGui::Render();
    glfwGetFramebufferSize(window_, &fb_w_, &fb_h_);
    glViewport(0, 0, fb_w_, fb_h_);
    const ImVec4 bg = ImGui::ColorConvertU32ToFloat4(palette(shell_.state().presenter).window_bg);
    glClearColor(bg.x, bg.y, bg.z, 1.0f);
    glClear(GL_COLOR_BUFFER_BIT);
    if (renderer_)
      renderer_->render(*ImGui::GetDrawData());
    else
      ImGui_ImplOpenGL3_RenderDrawData(ImGui::GetDrawData());
    // Background work (attention capture, quality sweep, compare variant) finishes first, and
    // a few frames are drawn after it did (a job can finish between a panel's draw and this
    // check, and a panel takes its result on the next frame), so the screenshot shows it.
    // A caption on another variant re-runs the scenario: the screenshot waits for that run too.
    const bool rerunning =
        shell_.caption_pending() || (shell_.session() && shell_.session()->is_running());
    idle_frames_ = shell_.panels_busy() || (!live_ && rerunning) ? 0 : idle_frames_ + 1;
  }

  // After --frames frames: waits (true = not yet) for the panels to settle, then writes the
  // --screenshot; true once it is written or failed.
  bool capture_done(int frame) {
    if (idle_frames_ < 3 && glfwGetTime() < kMaxCaptureWaitSeconds) {
      if (idle_frames_ == 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
      return false;
    }
    try {
      save_framebuffer_png(options_.screenshot, fb_w_, fb_h_);
      std::printf("kvscope-ui: wrote %s (%dx%d, %d frames)\n", options_.screenshot.c_str(), fb_w_,
                  fb_h_, frame + 1);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "kvscope-ui: %s\n", e.what());
      exit_code_ = 1;
    }
    return true;
  }

  // F12 or the menu: a timestamped PNG beside the working directory.
  void save_requested() {
    want_screenshot_ = false;
    const std::string path = timestamped_png_name();
    try {
      save_framebuffer_png(path, fb_w_, fb_h_);
#if defined(__EMSCRIPTEN__)
      web_offer_download(path);  // the page's file system is gone with the tab
      shell_.set_status("downloaded " + path);
#else
      shell_.set_status("saved " + path);
#endif
    } catch (const std::exception& e) {
      shell_.set_status(std::string("screenshot failed: ") + e.what());
    }
  }

  GLFWwindow* window_;
  const AppOptions& options_;
  UiShell& shell_;
  ImGuiIO& io_;
  bool capture_;
  bool live_;
  double last_;
  WindowedGeometry saved_;
  std::unique_ptr<DrawRenderer> renderer_;  // null: ImGui's backend draws (--renderer imgui)
  bool want_screenshot_ = false;
  int idle_frames_ = 0;  // consecutive frames drawn with no panel busy (screenshots)
  int fb_w_ = 0, fb_h_ = 0;
  int exit_code_ = 0;
  std::string title_;  // the window title last set
#if defined(__EMSCRIPTEN__)
  int frames_ = 0;  // the browser's frames so far
#endif
};

#if defined(__EMSCRIPTEN__)
// The page's frames: while the first run computes its first step, the page's status line says
// so (counting the seconds); then the shell and its frame loop are made and run every frame.
struct WebStart {
  GLFWwindow* window;
  AppOptions options;  // FrameLoop keeps a reference
  Fonts fonts;
  std::unique_ptr<RunSession> session;
  UiShell* shell = nullptr;
  FrameLoop* loop = nullptr;
  double opened = glfwGetTime();

  static void frame(void* self) {
    auto* w = static_cast<WebStart*>(self);
    if (w->loop == nullptr && !w->start()) return;
    FrameLoop::browser_frame(w->loop);
  }

  // False while the first step computes (or when it failed: the page says why).
  bool start() {
    if (!session->has_step()) {
      if (session->is_running())
        web_status(session->first_step_line(glfwGetTime() - opened));
      else
        web_fail(session->first_step_error());
      return false;
    }
    web_status("");
    shell = new UiShell(std::move(session), fonts);
    if (!prepare_shell(*shell, options, false, false)) {
      web_fail("the page's options do not fit this run (see the console)");
      return false;
    }
    web_set_shell(shell);
    loop = new FrameLoop(window, options, *shell, false);
    return true;
  }
};
#endif

}  // namespace

int run_app(const AppOptions& options) {
  // The run opens before the window: a bad scenario is a one-line error and exit code 2.
  std::unique_ptr<RunSession> session;
  // In the browser the first step runs on the worker: a SmolLM2 chat's prefill takes seconds
  // there, and the page would stop for them (WebStart).
#if defined(__EMSCRIPTEN__)
  constexpr RunSession::FirstStep kFirst = RunSession::FirstStep::kOnWorker;
#else
  constexpr RunSession::FirstStep kFirst = RunSession::FirstStep::kHere;
#endif
  try {
    session = options.attach ? RunSession::attach(*options.attach)
                             : RunSession::open(options.input, false, initial_policy(options),
                                                options.model, kFirst);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kvscope-ui: %s\n", e.what());
    return 2;
  }
  GLFWwindow* window = open_window(options);
  if (window == nullptr) return 3;

  IMGUI_CHECKVERSION();
  ImGui::CreateContext();
  ImGuiIO& io = ImGui::GetIO();
  io.IniFilename = nullptr;  // every start gets the same tidy layout
  const Fonts fonts = load_fonts(io);
  ImGui_ImplGlfw_InitForOpenGL(window, true);
  glfwSetKeyCallback(window, on_key);  // instead of the backend's: it gets them from g_keys
  ImGui_ImplOpenGL3_Init(kGlslVersion);

#if defined(__EMSCRIPTEN__)
  // In the browser the page's event loop calls each frame, and main() returns at once: the shell
  // and the loop live on the heap for as long as the tab does (the runtime stays up after main).
  // They are made once the first run has its first step (WebStart::frame).
  auto* start = new WebStart{window, options, fonts, std::move(session)};
  emscripten_set_main_loop_arg(&WebStart::frame, start, 0, false);
  return 0;
#else
  int exit_code = 0;
  {
    // Screenshots show the finished run, deterministically (a live stream never finishes: its
    // screenshot is taken after `frames` frames of real time).
    const bool capture = !options.screenshot.empty();
    const bool live = options.attach.has_value();
    if (capture && !live) session->wait();
    UiShell shell(std::move(session), fonts);
    if (prepare_shell(shell, options, capture, live))
      exit_code = FrameLoop(window, options, shell, live).run();
    else
      exit_code = 2;
  }
  ImGui_ImplOpenGL3_Shutdown();
  ImGui_ImplGlfw_Shutdown();
  ImGui::DestroyContext();
  glfwDestroyWindow(window);
  glfwTerminate();
  return exit_code;
#endif
}

}  // namespace kvscope::ui
