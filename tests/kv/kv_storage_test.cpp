// KvStorage's byte moves: block and slot copies and block read/write on the host tiles, and the
// same moves handed to an attached device (KvDeviceBytes) instead, the tiles left alone.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <memory>
#include <vector>

#include "engine/common/error.h"
#include "engine/kv/kv_format.h"
#include "engine/kv/kv_storage.h"
#include "tests/test_support.h"

namespace kvscope {
namespace {

KvLayout int8_layout() {
  const KvFormat f = parse_kv_format("int8", "test");  // codes + a per-token scale per head
  return KvLayout{2, 2, 8, 4, 6, f, f};
}

// Every byte of the pool set to a pattern that names its place.
void fill(KvStorage& s) {
  const KvLayout& L = s.layout();
  for (int layer = 0; layer < L.n_layers; ++layer) {
    for (KvKind kind : {KvKind::kKey, KvKind::kValue}) {
      for (int b = 0; b < L.num_blocks; ++b) {
        std::byte* t = s.tile(layer, kind, BlockId(b));
        for (std::size_t i = 0; i < L.tile_bytes(kind); ++i)
          t[i] = std::byte(static_cast<unsigned char>(i * 7 + b * 31 + layer * 3 + int(kind)));
      }
    }
  }
}

std::vector<std::byte> tile_bytes(const KvStorage& s, int layer, KvKind kind, int block) {
  const std::byte* t = s.tile(layer, kind, BlockId(block));
  return {t, t + s.layout().tile_bytes(kind)};
}

TEST(KvStorage, BlockAndSlotCopiesMoveEveryLayersKAndV) {
  KvStorage s(int8_layout());
  fill(s);
  const KvLayout& L = s.layout();
  s.copy_block(BlockId(1), BlockId(4));
  for (int layer = 0; layer < L.n_layers; ++layer) {
    for (KvKind kind : {KvKind::kKey, KvKind::kValue})
      EXPECT_EQ(tile_bytes(s, layer, kind, 4), tile_bytes(s, layer, kind, 1));
  }
  // Slot 2 of block 0 to slot 1 of block 3: its codes row and its scales, nothing else.
  std::vector<std::byte> before = tile_bytes(s, 1, KvKind::kValue, 3);
  s.copy_slot(BlockId(0), 2, BlockId(3), 1);
  const KvFormat& f = L.v_format;
  const std::size_t row = f.row_bytes(L.kv_heads, L.head_dim);
  const std::size_t meta = f.token_meta_bytes(L.kv_heads, L.head_dim, KvKind::kValue);
  ASSERT_GT(meta, 0u);
  const std::vector<std::byte> src = tile_bytes(s, 1, KvKind::kValue, 0);
  std::copy_n(src.begin() + 2 * row, row, before.begin() + row);
  const std::size_t meta_base = L.block_size * row;
  std::copy_n(src.begin() + meta_base + 2 * meta, meta, before.begin() + meta_base + meta);
  EXPECT_EQ(tile_bytes(s, 1, KvKind::kValue, 3), before);
}

TEST(KvStorage, ABlockReadOutAndWrittenBackRoundTrips) {
  KvStorage s(int8_layout());
  fill(s);
  const KvLayout& L = s.layout();
  std::vector<std::byte> out(L.block_bytes());
  s.read_block(BlockId(2), out.data());
  // [n_layers][K tile, V tile]
  std::vector<std::byte> want;
  for (int layer = 0; layer < L.n_layers; ++layer) {
    for (KvKind kind : {KvKind::kKey, KvKind::kValue}) {
      const std::vector<std::byte> t = tile_bytes(s, layer, kind, 2);
      want.insert(want.end(), t.begin(), t.end());
    }
  }
  EXPECT_EQ(out, want);
  s.write_block(BlockId(5), out.data());
  std::vector<std::byte> back(L.block_bytes());
  s.read_block(BlockId(5), back.data());
  EXPECT_EQ(back, want);
}

// A device that applies the moves to its own copy of the regions.
class FakeDevice final : public KvDeviceBytes {
 public:
  explicit FakeDevice(const KvStorage& s)
      : k(s.tile(0, KvKind::kKey, BlockId(0)),
          s.tile(0, KvKind::kKey, BlockId(0)) + region(s, KvKind::kKey)),
        v(s.tile(0, KvKind::kValue, BlockId(0)),
          s.tile(0, KvKind::kValue, BlockId(0)) + region(s, KvKind::kValue)) {}
  void move(std::span<const KvMove> moves) override {
    for (const KvMove& m : moves) std::memmove(at(m.kind, m.dst), at(m.kind, m.src), m.bytes);
    ++calls;
  }
  void read(std::span<const KvSpan> spans, std::byte* out) override {
    for (const KvSpan& s : spans) out = std::copy_n(at(s.kind, s.offset), s.bytes, out);
    ++calls;
  }
  void write(std::span<const KvSpan> spans, const std::byte* in) override {
    for (const KvSpan& s : spans) {
      std::copy_n(in, s.bytes, at(s.kind, s.offset));
      in += s.bytes;
    }
    ++calls;
  }
  void rotate_keys(std::span<const KvKeyRotation> r, float theta) override {
    rotations.assign(r.begin(), r.end());
    rotation_theta = theta;
    ++calls;
  }
  void drop_staging(BlockId block) override { dropped.push_back(block); }
  std::vector<std::byte> k, v;
  std::vector<BlockId> dropped;  // blocks whose KIVI open groups the storage told it to forget
  std::vector<KvKeyRotation> rotations;
  float rotation_theta = 0.0f;
  int calls = 0;

 private:
  static std::size_t region(const KvStorage& s, KvKind kind) {
    return static_cast<std::size_t>(s.layout().n_layers) * s.layout().num_blocks *
           s.layout().tile_bytes(kind);
  }
  std::byte* at(KvKind kind, std::size_t offset) {
    return (kind == KvKind::kKey ? k : v).data() + offset;
  }
};

TEST(KvStorage, AnAttachedDeviceGetsEveryByteMoveAndTheTilesStayAsTheyWere) {
  KvStorage host(int8_layout()), dev(int8_layout());
  fill(host);
  fill(dev);
  auto device = std::make_shared<FakeDevice>(dev);
  dev.attach_device(device);
  EXPECT_TRUE(dev.on_device());
  const KvLayout& L = host.layout();
  std::vector<std::byte> block(L.block_bytes());
  for (KvStorage* s : {&host, &dev}) {
    s->copy_block(BlockId(1), BlockId(4));
    s->copy_slot(BlockId(0), 2, BlockId(3), 1);
    s->read_block(BlockId(1), block.data());
    s->write_block(BlockId(5), block.data());
  }
  EXPECT_EQ(device->calls, 4);
  // A freed block's KIVI open groups are forgotten where they live: the holder is told too.
  dev.drop_block_staging(BlockId(3));
  EXPECT_EQ(device->dropped, std::vector<BlockId>{BlockId(3)});
  // The device's copy now equals what the host did to its own tiles...
  std::vector<std::byte> hk(host.tile(0, KvKind::kKey, BlockId(0)),
                            host.tile(0, KvKind::kKey, BlockId(0)) + device->k.size());
  std::vector<std::byte> hv(host.tile(0, KvKind::kValue, BlockId(0)),
                            host.tile(0, KvKind::kValue, BlockId(0)) + device->v.size());
  EXPECT_EQ(device->k, hk);
  EXPECT_EQ(device->v, hv);
  // ...and the attached storage's own tiles were not touched.
  KvStorage untouched(int8_layout());
  fill(untouched);
  for (int b = 0; b < L.num_blocks; ++b)
    EXPECT_EQ(tile_bytes(dev, 1, KvKind::kKey, b), tile_bytes(untouched, 1, KvKind::kKey, b));
  // Key re-rotation (token eviction's position shift) goes to the holder; without one the storage
  // says so, and the CPU backend rotates the tiles (TokenEvictor's tests).
  const KvKeyRotation shift[] = {{BlockId(2), 3, -5}, {BlockId(0), 0, -1}};
  EXPECT_FALSE(host.rotate_keys_on_device(shift, 10000.0f));
  EXPECT_TRUE(dev.rotate_keys_on_device(shift, 10000.0f));
  EXPECT_EQ(device->calls, 5);
  ASSERT_EQ(device->rotations.size(), 2u);
  EXPECT_EQ(device->rotations[0].block, BlockId(2));
  EXPECT_EQ(device->rotations[0].offset, 3);
  EXPECT_EQ(device->rotations[0].delta, -5);
  EXPECT_EQ(device->rotation_theta, 10000.0f);

  EXPECT_EQ(test::error_of([&] { dev.attach_device(std::make_shared<FakeDevice>(dev)); }),
            "kv storage: expected one backend holding the pool's bytes, got a second one "
            "attaching");
  device.reset();  // the backend went away
  EXPECT_EQ(test::error_of([&] { dev.copy_block(BlockId(0), BlockId(1)); }),
            "kv storage: the backend that held this pool's bytes is gone; expected it to outlive "
            "the pool's use");
  // Nor can another take its place: it would start from uninitialized memory.
  EXPECT_NE(test::error_of([&] { dev.attach_device(std::make_shared<FakeDevice>(dev)); }), "");
  // Moves outside the pool are bugs.
  const auto internal_of = [](const std::function<void()>& fn) -> std::string {
    try {
      fn();
    } catch (const InternalError& e) {
      return e.what();
    }
    return "(no internal error)";
  };
  EXPECT_NE(internal_of([&] {
              host.copy_block(BlockId(0), BlockId(6));
            }).find("copy_block destination block 6 outside the pool's 6"),
            std::string::npos);
  EXPECT_NE(internal_of([&] {
              host.copy_slot(BlockId(0), 4, BlockId(1), 0);
            }).find("copy_slot offset 4 outside a block of 4"),
            std::string::npos);
  const KvKeyRotation outside[] = {{BlockId(1), 4, 1}};
  EXPECT_NE(internal_of([&] {
              host.rotate_keys_on_device(outside, 1.0f);
            }).find("rotate_keys offset 4 outside a block of 4"),
            std::string::npos);
}

}  // namespace
}  // namespace kvscope
