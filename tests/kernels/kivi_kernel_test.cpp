// KIVI on the device, executed on the SIMT emulator against the CPU (engine/quant/kv_codec.cpp):
// the group hand-over kernels write the CPU's bytes (keys per channel over the group, into every
// tile the group touches; values per token), and attention reads closed groups from the tiles and
// the open group from its full-precision rows, as the CPU does, one query, split-K and a batch.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "engine/backend/cpu/cpu_ops.h"
#include "engine/quant/kv_codec.h"
#include "kernels/ops/kv_kivi.cuh"
#include "kernels/ops/paged_attention.cuh"
#include "tests/kernels/kernel_test_support.h"
#include "tests/quant/kv_test_support.h"

namespace kvscope::kernels {
namespace {

using test::randn;

constexpr int kKvHeads = 3, kHeadDim = 64, kKvDim = kKvHeads * kHeadDim;  // SmolLM2's K/V row

// The kernels' view of one kind of a KIVI pool (layer 0).
KvTiles kivi_tiles(KvStorage& st, KvKind kind) {
  const KvFormat& f = st.layout().format(kind);
  const bool two = f.dtype == KvDtype::kKivi2;
  const int code =
      kind == KvKind::kKey ? (two ? kKvKiviKey2 : kKvKiviKey4) : (two ? kKvInt2 : kKvInt4);
  return {reinterpret_cast<unsigned char*>(st.tile(0, kind, BlockId(0))),
          static_cast<long>(st.layout().tile_bytes(kind)), code, f.effective_group(kKvDim),
          f.residual};
}

// Keys with KIVI's outlier channels (every 16th channel 20x larger) and one infinity; values
// without. Token t's row at [t * kKvDim].
void kivi_rows(int tokens, std::vector<float>& ks, std::vector<float>& vs) {
  ks = randn(static_cast<std::size_t>(tokens) * kKvDim, 91u);
  vs = randn(ks.size(), 92u);
  for (int t = 0; t < tokens; ++t)
    for (int c = 0; c < kKvDim; c += 16) ks[static_cast<std::size_t>(t) * kKvDim + c] *= 20.0f;
  ks[static_cast<std::size_t>(5) * kKvDim + 7] = INFINITY;  // no part of its channel's range
}

struct Case {
  const char* format;
  int block_size;
};
// Residual 32 over tiles of 1 and 16 tokens (a group spans tiles: each holds its group's set)
// and of 64 (a tile holds two groups' sets); residual 16 over 16 and 64; 2 and 4 bits.
constexpr Case kCases[] = {{"kivi2", 1},  {"kivi2", 16},     {"kivi4", 16},
                           {"kivi4", 64}, {"kivi2-r16", 64}, {"kivi4-r16-g16", 16}};

std::string name_of(const Case& c) {
  return std::string(c.format) + " block size " + std::to_string(c.block_size);
}

// The hand-over kernels write the very bytes the CPU writes: codes, value scales, and each key
// group's channel scales in every tile the group touches.
TEST(KiviKernels, GroupHandOverWritesTheCpusBytes) {
  const int tokens = 100;  // three groups of 32 (six of 16) closed, the rest open
  std::vector<float> ks, vs;
  kivi_rows(tokens, ks, vs);
  for (const Case& c : kCases) {
    const KvFormat fmt = parse_kv_format(c.format, "test");
    const int B = c.block_size, R = fmt.residual;
    test::QuantCache cpu_cache(fmt, fmt, B, tokens, kKvHeads, kHeadDim);
    test::QuantCache gpu_cache(fmt, fmt, B, tokens, kKvHeads, kHeadDim);
    for (int t = 0; t < tokens; ++t) {
      cpu_cache.append(&ks[static_cast<std::size_t>(t) * kKvDim],
                       &vs[static_cast<std::size_t>(t) * kKvDim]);
    }
    KvStorage& st = gpu_cache.storage();
    for (KvKind kind : {KvKind::kKey, KvKind::kValue}) {  // the kernels' pool starts as garbage
      std::memset(st.tile(0, kind, BlockId(0)), 0xAB,
                  st.layout().tile_bytes(kind) * static_cast<std::size_t>(st.layout().num_blocks));
    }
    const KvSeqView view = cpu_cache.view();
    std::vector<int> table;
    for (BlockId b : view.blocks) table.push_back(static_cast<int>(b.value));
    const int closed = tokens - tokens % R;
    for (int g0 = 0; g0 < closed; g0 += R) {
      launch_kivi_flush(kivi_tiles(st, KvKind::kKey), true, table.data(), g0, B,
                        &ks[static_cast<std::size_t>(g0) * kKvDim], kKvDim);
      launch_kivi_flush(kivi_tiles(st, KvKind::kValue), false, table.data(), g0, B,
                        &vs[static_cast<std::size_t>(g0) * kKvDim], kKvDim);
    }
    const KvStorage& a = cpu_cache.storage();
    for (KvKind kind : {KvKind::kKey, KvKind::kValue}) {
      const quant::TileGeometry g = quant::tile_geometry(a.layout(), kind);
      const std::string what = name_of(c) + (kind == KvKind::kKey ? " K" : " V");
      for (int t = 0; t < closed; ++t) {
        const BlockId b = view.blocks[static_cast<std::size_t>(t / B)];
        const auto* pa = reinterpret_cast<const unsigned char*>(a.tile(0, kind, b));
        const auto* pb = reinterpret_cast<const unsigned char*>(st.tile(0, kind, b));
        const std::size_t off = static_cast<std::size_t>(t % B);
        ASSERT_EQ(std::memcmp(pa + off * g.row_bytes, pb + off * g.row_bytes, g.row_bytes), 0)
            << what << " token " << t << ": codes";
        ASSERT_EQ(std::memcmp(pa + g.meta_offset + off * g.token_meta_bytes,
                              pb + g.meta_offset + off * g.token_meta_bytes, g.token_meta_bytes),
                  0)
            << what << " token " << t << ": per-token scales";
      }
      if (kind == KvKind::kValue) continue;
      const std::size_t set_bytes = static_cast<std::size_t>(kKvDim) * 4;
      for (int g0 = 0; g0 < closed; g0 += R) {
        const std::size_t set = B >= R ? static_cast<std::size_t>((g0 % B) / R) : 0;
        for (int blk = g0 / B; blk <= (g0 + R - 1) / B; ++blk) {
          const BlockId b = view.blocks[static_cast<std::size_t>(blk)];
          const auto* pa = reinterpret_cast<const unsigned char*>(a.tile(0, kind, b));
          const auto* pb = reinterpret_cast<const unsigned char*>(st.tile(0, kind, b));
          ASSERT_EQ(std::memcmp(pa + g.tile_meta_offset + set * set_bytes,
                                pb + g.tile_meta_offset + set * set_bytes, set_bytes),
                    0)
              << what << " group at " << g0 << ", logical block " << blk << ": channel scales";
        }
      }
    }
  }
}

// Every captured attention row, in call order.
struct CapturedRows : AttentionObserver {
  std::vector<float> all;
  void on_attention(int, int, int, std::span<const float> w) override {
    all.insert(all.end(), w.begin(), w.end());
  }
};

// Float rounding in sums of another order, atol + rtol * |cpu|. The outlier key channels (20x)
// make dot products of terms up to ~80, whose rounding (~1e-4 in a score) reaches outputs that
// cancel to ~1e-2 as ~1e-5: atol 2e-5 (the other parity tests, without outliers, use 2e-6).
void expect_close(const std::vector<float>& got, const std::vector<float>& want,
                  const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t i = 0; i < got.size(); ++i) {
    ASSERT_LE(std::fabs(double(got[i]) - want[i]), 2e-5 + 1e-4 * std::fabs(double(want[i])))
        << what << " element " << i << ": " << got[i] << " vs " << want[i];
  }
}

// Attention over a KIVI pool whose last group is open: the kernels read closed groups from the
// tiles (dequantized per channel / per token) and the open group from the staging rows the CPU
// keeps, one query (one pass and split-K across the open group's boundary) and a batch of views
// ending inside the open group, on a closed group's last slot, and earlier.
TEST(KiviKernels, AttentionReadsClosedGroupsFromTilesAndTheOpenGroupFromItsRows) {
  const int heads = 9, tokens = 100;
  std::vector<float> ks, vs;
  kivi_rows(tokens, ks, vs);
  for (const Case& c : kCases) {
    const KvFormat fmt = parse_kv_format(c.format, "test");
    const int B = c.block_size, R = fmt.residual, open_start = tokens - tokens % R;
    test::QuantCache cache(fmt, fmt, B, tokens, kKvHeads, kHeadDim);
    for (int t = 0; t < tokens; ++t) {
      cache.append(&ks[static_cast<std::size_t>(t) * kKvDim],
                   &vs[static_cast<std::size_t>(t) * kKvDim]);
    }
    KvStorage& st = cache.storage();
    const KvSeqView all = cache.view();
    const BlockId open_block = all.blocks[static_cast<std::size_t>(open_start / B)];
    const float* open_k = st.staging(0, KvKind::kKey, open_block, open_start % B);
    const float* open_v = st.staging(0, KvKind::kValue, open_block, open_start % B);
    ASSERT_NE(open_k, nullptr);
    ASSERT_NE(open_v, nullptr);
    std::vector<int> table;
    for (BlockId b : all.blocks) table.push_back(static_cast<int>(b.value));
    // Views: the whole sequence, one slot into the open group, the closed groups alone, one group.
    const std::vector<int> slots = {tokens, open_start + 1, open_start, R};
    const std::size_t qn = static_cast<std::size_t>(heads) * kHeadDim;
    const auto q = randn(qn * slots.size(), 93u, 2.0f);
    std::vector<float> want(q.size()), scratch;
    CapturedRows rows;
    for (std::size_t i = 0; i < slots.size(); ++i) {
      KvSeqView v = all;
      v.num_slots = slots[i];
      cpu::paged_attention(v, 0, {heads, kKvHeads, kHeadDim}, q.data() + i * qn,
                           want.data() + i * qn, 0, &rows, scratch);
    }
    PagedKv kv;
    kv.k = kivi_tiles(st, KvKind::kKey);
    kv.v = kivi_tiles(st, KvKind::kValue);
    kv.block_table = table.data();
    kv.num_slots = tokens;
    kv.block_size = B;
    kv.kv_heads = kKvHeads;
    kv.head_dim = kHeadDim;
    kv.open_k = open_k;
    kv.open_v = open_v;
    kv.open_k_start = kv.open_v_start = open_start;
    const std::vector<float> want0(want.begin(), want.begin() + static_cast<long>(qn));
    const std::vector<float> rows0(rows.all.begin(), rows.all.begin() + heads * tokens);
    std::vector<float> got(qn), weights(static_cast<std::size_t>(heads) * tokens);
    launch_paged_attention(got.data(), q.data(), kv, heads, 64, weights.data());
    expect_close(got, want0, name_of(c) + " one pass");
    expect_close(weights, rows0, name_of(c) + " one pass, captured rows");
    std::vector<float> work(static_cast<std::size_t>(
        split_workspace_floats(heads, kHeadDim, tokens, 24)));  // chunks straddle the groups
    launch_paged_attention_split(got.data(), q.data(), kv, heads, 24, work.data(), 64,
                                 weights.data());
    expect_close(got, want0, name_of(c) + " split-K");
    expect_close(weights, rows0, name_of(c) + " split-K, captured rows");

    // The batch: the open group's rows in one staging buffer, at their offset in it.
    std::vector<float> staging(static_cast<std::size_t>(R) * kKvDim * 2, NAN);
    std::memcpy(staging.data(), open_k, static_cast<std::size_t>(R) * kKvDim * sizeof(float));
    std::memcpy(staging.data() + static_cast<std::size_t>(R) * kKvDim, open_v,
                static_cast<std::size_t>(R) * kKvDim * sizeof(float));
    std::vector<int> meta;
    int weights_at = 0;
    for (int n : slots) {
      const bool open = n % R != 0;
      const int start = n - n % R;
      meta.insert(meta.end(),
                  {0, n, -1, weights_at, start, open ? 0 : -1, start, open ? R * kKvDim : -1});
      weights_at += heads * n;
    }
    PagedBatch pb;
    pb.k = kv.k;
    pb.v = kv.v;
    pb.block_size = B;
    pb.kv_heads = kKvHeads;
    pb.head_dim = kHeadDim;
    pb.tables = table.data();
    pb.meta = meta.data();
    pb.staging = staging.data();
    std::vector<float> batched(q.size()), batch_rows(static_cast<std::size_t>(weights_at));
    launch_paged_attention_batch(batched.data(), q.data(), pb, static_cast<int>(slots.size()),
                                 heads, tokens, 64, batch_rows.data());
    expect_close(batched, want, name_of(c) + " batch");
    expect_close(batch_rows, rows.all, name_of(c) + " batch, captured rows");
  }
}

}  // namespace
}  // namespace kvscope::kernels
