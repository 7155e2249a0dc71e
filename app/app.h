// The kvscope-ui application: a GLFW window with an OpenGL 3 context around the UiShell.
#pragma once

#include <optional>
#include <string>

#include "app/core/attach_feed.h"

namespace kvscope::ui {

struct AppOptions {
  std::string input;  // scenario .json or recording (.kvr); main fills in the default
  std::optional<AttachRequest> attach;  // --attach: follow a live engine instead of `input`
  int step = -1;                        // screenshots: the step shown (-1: the middle of the run)
  std::string screenshot;               // write a PNG after `frames` frames and exit
  int frames = 30;
  bool presenter = false;
  int workspace = 0;  // --view: 0 pool, 1 prefix, 2 attention & quality, 3 compare, 4 live
  bool workspace_given = false;  // --view was given (else --attach opens the live workspace)
  std::string model;             // --model: the scenario runs on this model ("" = its own)
  std::string backend;           // --backend cuda-sim|cuda ("" or "cpu": the CPU), scenarios only
  int caption = 0;  // --caption N: open at presenter caption N (1-based) with its view; 0 = none
  bool imgui_renderer = false;  // --renderer imgui: ImGui's OpenGL3 backend draws, not renderer.h
  int width = 1600;
  int height = 1000;
};

// Runs the app; returns the process exit code (0 ok, 2 bad input, 3 no display, 1 screenshot
// failure).
int run_app(const AppOptions& options);

}  // namespace kvscope::ui
