// KeyQueue (app/core/key_queue.h): a key tapped between two frames reaches ImGui 1.86 as a press
// in one frame and a release in the next, chords stay together, order is kept.
#include "app/core/key_queue.h"

#include <gtest/gtest.h>
#include <imgui.h>

#include <vector>

#include "app/core/headless.h"

namespace kvscope::ui {
namespace {

constexpr int kRelease = 0, kPress = 1, kRepeat = 2;  // GLFW's actions
constexpr int kLeftControl = 341;                     // GLFW_KEY_LEFT_CONTROL

// What ImGui 1.86's GLFW backend does with a key event (imgui_impl_glfw.cpp's KeyCallback): the
// key's slot of io.KeysDown, and Ctrl recomputed from the Control keys' slots.
void like_the_backend(const KeyEvent& e) {
  ImGuiIO& io = ImGui::GetIO();
  if (e.action == kPress) io.KeysDown[e.key] = true;
  if (e.action == kRelease) io.KeysDown[e.key] = false;
  io.KeyCtrl = io.KeysDown[kLeftControl];
}

std::vector<KeyEvent> ctrl_s_tap() {
  return {{kLeftControl, 0, kPress, 0},
          {'S', 0, kPress, 2},
          {'S', 0, kRelease, 2},
          {kLeftControl, 0, kRelease, 0}};
}

bool ctrl_s_pressed() {
  return ImGui::GetIO().KeyCtrl && ImGui::IsKeyPressed('S');
}

TEST(KeyQueue, ATapBetweenTwoFramesIsPressedInOneFrameAndReleasedInTheNext) {
  HeadlessImGui imgui(ImVec2(800, 600));
  imgui.new_frame();
  imgui.render();

  // The backend alone: the whole tap lands before the next frame, which never sees S down.
  for (const KeyEvent& e : ctrl_s_tap()) like_the_backend(e);
  imgui.new_frame();
  EXPECT_FALSE(ctrl_s_pressed()) << "ImGui 1.86 saw a tap between frames: is the queue needed?";
  imgui.render();

  KeyQueue keys;
  for (const KeyEvent& e : ctrl_s_tap()) keys.push(e);
  EXPECT_EQ(keys.deliver(like_the_backend), 2u);  // Control and S down; S's release waits
  imgui.new_frame();
  EXPECT_TRUE(ctrl_s_pressed());
  imgui.render();
  EXPECT_EQ(keys.deliver(like_the_backend), 2u);
  imgui.new_frame();
  EXPECT_FALSE(ImGui::IsKeyDown('S'));
  EXPECT_FALSE(ImGui::GetIO().KeyCtrl);
  imgui.render();
  EXPECT_EQ(keys.waiting(), 0u);
}

TEST(KeyQueue, KeepsTheOrderAndLetsRepeatsThrough) {
  KeyQueue keys;
  for (const KeyEvent& e : std::vector<KeyEvent>{{'A', 0, kPress, 0},
                                                 {'A', 0, kRepeat, 0},
                                                 {'A', 0, kRepeat, 0},
                                                 {'A', 0, kRelease, 0},
                                                 {'B', 0, kPress, 0},
                                                 {'A', 0, kPress, 0}})
    keys.push(e);
  std::vector<KeyEvent> got;
  const auto take = [&](const KeyEvent& e) { got.push_back(e); };
  EXPECT_EQ(keys.deliver(take), 3u);  // A down and its repeats; A up waits, so B waits behind it
  EXPECT_EQ(keys.deliver(take), 2u);  // A up, B down; A's second press waits
  EXPECT_EQ(keys.deliver(take), 1u);
  EXPECT_EQ(keys.deliver(take), 0u);
  ASSERT_EQ(got.size(), 6u);
  const int order[][2] = {{'A', kPress},   {'A', kRepeat}, {'A', kRepeat},
                          {'A', kRelease}, {'B', kPress},  {'A', kPress}};
  for (std::size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].key, order[i][0]) << i;
    EXPECT_EQ(got[i].action, order[i][1]) << i;
  }
}

TEST(KeyQueue, AFloodIsDeliveredAtOnce) {
  // Typed while frames had stopped (a hidden tab): a frame takes them all, as the backend would.
  KeyQueue keys;
  for (std::size_t i = 0; i <= KeyQueue::kMaxHeld; i += 2) {
    keys.push({'X', 0, kPress, 0});
    keys.push({'X', 0, kRelease, 0});
  }
  const std::size_t n = keys.waiting();
  ASSERT_GT(n, KeyQueue::kMaxHeld);
  EXPECT_EQ(keys.deliver([](const KeyEvent&) {}), n);
  EXPECT_EQ(keys.waiting(), 0u);
}

}  // namespace
}  // namespace kvscope::ui
