// Key events held back until the frame that can see them.
//
// Dear ImGui 1.86 (Debian's, and the browser build's) reads the keyboard as a state: the GLFW
// backend sets io.KeysDown[key] as each event arrives, and a frame sees which keys are down when
// it starts. A key pressed and released between two frames (a quick tap while a frame is slow: a
// loaded machine, a software-rendered browser tab) is never seen down, and Ctrl+S is lost.
//
// KeyQueue keeps the window's key events in order and hands them to the backend at the start of
// each frame, stopping before an event that would change a key already changed in this frame:
// the tap's press is seen in one frame and its release in the next. Keys chorded in one instant
// (Control, then S) still arrive in the same frame. ImGui 1.87's input queue does the same.
#pragma once

#include <cstddef>
#include <deque>
#include <functional>

namespace kvscope::ui {

struct KeyEvent {
  int key = 0;  // GLFW key code (ASCII for letters and digits)
  int scancode = 0;
  int action = 0;  // GLFW_RELEASE (0), GLFW_PRESS (1), GLFW_REPEAT (2)
  int mods = 0;
};

class KeyQueue {
 public:
  // When more events than this wait (frames stopped while keys were typed: a hidden tab), a
  // frame takes them all at once, as the backend alone would.
  static constexpr std::size_t kMaxHeld = 256;

  void push(const KeyEvent& e) { events_.push_back(e); }

  // Delivers, in order, the events this frame can see (see above). Returns how many.
  std::size_t deliver(const std::function<void(const KeyEvent&)>& to_backend);

  std::size_t waiting() const { return events_.size(); }

 private:
  std::deque<KeyEvent> events_;
};

}  // namespace kvscope::ui
