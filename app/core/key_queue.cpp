// See key_queue.h.
#include "app/core/key_queue.h"

#include <algorithm>
#include <vector>

namespace kvscope::ui {

namespace {

constexpr int kRepeat = 2;  // GLFW_REPEAT: the key stays down, its state does not change

}  // namespace

std::size_t KeyQueue::deliver(const std::function<void(const KeyEvent&)>& to_backend) {
  const bool flood = events_.size() > kMaxHeld;
  std::vector<int> changed;  // keys whose state this frame already changed
  std::size_t n = 0;
  while (!events_.empty()) {
    const KeyEvent e = events_.front();
    const bool changes = e.action != kRepeat;
    if (!flood && changes && std::find(changed.begin(), changed.end(), e.key) != changed.end())
      break;  // its next change waits for the next frame, and so does everything after it
    if (changes) changed.push_back(e.key);
    events_.pop_front();
    to_backend(e);
    ++n;
  }
  return n;
}

}  // namespace kvscope::ui
