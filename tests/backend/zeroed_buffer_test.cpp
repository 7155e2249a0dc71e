// ZeroedBuffer (the KV pool's and copied weights' memory): zero-filled, writable, movable.
#include "engine/common/zeroed_buffer.h"

#include <gtest/gtest.h>

#include <cstring>
#include <utility>

namespace kvscope {
namespace {

TEST(ZeroedBuffer, ZeroFilledWritableAndAtLeastTheSizeAsked) {
  for (std::size_t bytes : {std::size_t{1}, std::size_t{4096}, std::size_t{5} << 20}) {
    ZeroedBuffer b(bytes);
    ASSERT_NE(b.data(), nullptr);
    EXPECT_GE(b.size(), bytes);
    for (std::size_t i = 0; i < bytes; i += 4093) EXPECT_EQ(b.data()[i], std::byte{0}) << i;
    EXPECT_EQ(b.data()[bytes - 1], std::byte{0});
    std::memset(b.data(), 0x5a, bytes);
    EXPECT_EQ(b.data()[bytes - 1], std::byte{0x5a});
    const long huge = b.huge_page_bytes();  // the kernel decides; the figure must be in range
    EXPECT_TRUE(huge == -1 || (huge >= 0 && static_cast<std::size_t>(huge) <= b.size())) << huge;
  }
}

TEST(ZeroedBuffer, MoveTransfersOwnership) {
  ZeroedBuffer a(1 << 16);
  a.data()[7] = std::byte{3};
  std::byte* p = a.data();
  ZeroedBuffer b(std::move(a));
  EXPECT_EQ(a.data(), nullptr);  // NOLINT(bugprone-use-after-move): moved-from state is defined
  EXPECT_EQ(a.size(), 0u);
  EXPECT_EQ(b.data(), p);
  ZeroedBuffer c;
  c = std::move(b);
  EXPECT_EQ(c.data(), p);
  EXPECT_EQ(c.data()[7], std::byte{3});
  EXPECT_EQ(ZeroedBuffer(0).data(), nullptr);
}

}  // namespace
}  // namespace kvscope
