// The emulator's memory trace of the attention kernels (kernels/sim/memory_trace.h,
// kernel_trace.h): recording changes nothing the kernels compute; each thread block reads exactly
// the KV blocks of its own block table; the bytes read are the context's rows; and the
// transactions of a warp's loads are what a hand count of the addresses gives.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "engine/quant/kv_codec.h"
#include "kernels/ops/decode_attention.cuh"
#include "kernels/ops/kv_write.cuh"
#include "kernels/ops/paged_attention.cuh"
#include "kernels/sim/kernel_trace.h"
#include "tests/kernels/kernel_test_support.h"
#include "tests/quant/kv_test_support.h"

namespace kvscope::kernels {
namespace {

using test::randn;

KvTiles tiles_of(KvStorage& st, KvKind kind, int code, int group) {
  KvTiles t{reinterpret_cast<unsigned char*>(st.tile(0, kind, BlockId(0))),
            static_cast<long>(st.layout().tile_bytes(kind)), code};
  t.group = group;
  return t;
}

// A pool of `tokens` random rows and a batch of three queries over it: sequence A (all the
// slots, through the pool's shuffled table), sequence B (the same blocks in reverse order, its
// first 37 slots) and A again at one slot.
struct Batch {
  Batch(const char* format, int code_, int block_size_, int tokens_, int heads_, int kv_heads_,
        int head_dim_, bool evict_b = false)
      : fmt(parse_kv_format(format, "test")),
        code(code_),
        block_size(block_size_),
        tokens(tokens_),
        heads(heads_),
        kv_heads(kv_heads_),
        head_dim(head_dim_),
        cache(fmt, fmt, block_size_, tokens_, kv_heads_, head_dim_) {
    const int kv_dim = kv_heads * head_dim;
    const auto k = randn(static_cast<std::size_t>(tokens) * kv_dim, 5u);
    const auto v = randn(static_cast<std::size_t>(tokens) * kv_dim, 6u);
    for (int t = 0; t < tokens; ++t)
      cache.append(k.data() + static_cast<std::size_t>(t) * kv_dim,
                   v.data() + static_cast<std::size_t>(t) * kv_dim);
    const KvSeqView a = cache.view();
    const int used = (tokens + block_size - 1) / block_size;
    for (int i = 0; i < used; ++i) table_a.push_back(static_cast<int>(a.blocks[i].value));
    table_b.assign(table_a.rbegin(), table_a.rend());
    tables = table_a;
    tables.insert(tables.end(), table_b.begin(), table_b.end());
    slots = {tokens, std::min(37, tokens), 1};
    const int offsets[] = {0, used, 0};
    // With evict_b, sequence B has every third slot evicted (its live map): lanes skip those
    // slots' loads.
    live.assign(static_cast<std::size_t>(slots[1]), 1);
    for (std::size_t t = 0; evict_b && t < live.size(); t += 3) live[t] = 0;
    for (int i = 0; i < 3; ++i) {
      const int live_at = i == 1 && evict_b ? 0 : -1;
      meta.insert(meta.end(), {offsets[i], slots[i], live_at, -1, slots[i], -1, slots[i], -1});
    }
    b.k = tiles_of(cache.storage(), KvKind::kKey, code, fmt.effective_group(kv_dim));
    b.v = tiles_of(cache.storage(), KvKind::kValue, code, fmt.effective_group(kv_dim));
    b.block_size = block_size;
    b.kv_heads = kv_heads;
    b.head_dim = head_dim;
    b.tables = tables.data();
    b.meta = meta.data();
    b.live = live.data();
    q = randn(static_cast<std::size_t>(3) * heads * head_dim, 7u, 2.0f);
  }
  // The table of query i, as the kernel reads it.
  std::vector<int> table_of(int i) const {
    const std::vector<int>& t = i == 1 ? table_b : table_a;
    const int n = (slots[static_cast<std::size_t>(i)] + block_size - 1) / block_size;
    return {t.begin(), t.begin() + n};
  }
  // Runs the paged batch kernel (decode = false) or the decode kernels over the three queries.
  std::vector<float> run(bool decode) {
    std::vector<float> out(q.size());
    if (decode) {
      std::vector<float> work(
          static_cast<std::size_t>(decode_workspace_floats(3, heads, kv_heads, head_dim, tokens)));
      launch_decode_attention_batch(out.data(), q.data(), b, 3, heads, tokens, work.data());
    } else {
      launch_paged_attention_batch(out.data(), q.data(), b, 3, heads, tokens, 64);
    }
    return out;
  }

  KvFormat fmt;
  int code, block_size, tokens, heads, kv_heads, head_dim;
  test::QuantCache cache;
  std::vector<int> table_a, table_b, tables, meta, slots;
  std::vector<unsigned char> live;
  PagedBatch b;
  std::vector<float> q;
};

// The first recorded launch whose kernel is `name`.
const sim::TraceLaunch& launch_named(const sim::TraceRecorder& r, const std::string& name) {
  for (const sim::TraceLaunch& l : r.launches)
    if (l.kernel == name && l.recorded) return l;
  throw std::runtime_error("no recorded launch of " + name);
}

TEST(KernelTrace, RecordingChangesNothingTheKernelsCompute) {
  for (const auto& [name, code] :
       {std::pair{"fp16", kKvF16}, std::pair{"int8", kKvInt8}, std::pair{"int4", kKvInt4}}) {
    for (bool decode : {false, true}) {
      if (decode && code == kKvInt4) continue;  // the decode kernels do not read int4
      Batch batch(name, code, 16, 70, 8, 2, 32);
      const std::vector<float> plain = batch.run(decode);
      sim::TraceRecorder r;
      std::vector<float> traced;
      {
        sim::ScopedRecorder on(r);
        traced = batch.run(decode);
      }
      ASSERT_EQ(plain.size(), traced.size());
      EXPECT_EQ(std::memcmp(plain.data(), traced.data(), plain.size() * sizeof(float)), 0)
          << name << (decode ? " decode" : " paged");
      ASSERT_FALSE(r.launches.empty());
      EXPECT_FALSE(r.launches.front().accesses.empty()) << name;
    }
  }
}

// The KV write kernels store the same bytes with a recorder as without, and the recorder sees
// their stores into the block the table gives the slot, with the write's row and slot as role.
TEST(KernelTrace, RecordingAKvWriteChangesNoByteItStores) {
  for (const auto& [name, code] :
       {std::pair{"fp16", kKvF16}, std::pair{"int8", kKvInt8}, std::pair{"int4", kKvInt4}}) {
    Batch plain(name, code, 16, 40, 8, 2, 32), traced(name, code, 16, 40, 8, 2, 32);
    const int kv_dim = 2 * 32;
    const auto k = randn(kv_dim, 11u), v = randn(kv_dim, 12u);
    const int slot = 21;  // block table_a[1], row 5
    const int block = plain.table_a[1];
    const std::size_t k_bytes = plain.cache.storage().layout().tile_bytes(KvKind::kKey);
    const auto* k_tile = reinterpret_cast<const unsigned char*>(
        plain.cache.storage().tile(0, KvKind::kKey, BlockId(block)));
    const std::vector<unsigned char> before(k_tile, k_tile + k_bytes);
    launch_kv_write(plain.b.k, plain.b.v, plain.table_a.data(), slot, 16, k.data(), v.data(), 2,
                    32);
    sim::TraceRecorder r;
    {
      sim::ScopedRecorder on(r);
      launch_kv_write(traced.b.k, traced.b.v, traced.table_a.data(), slot, 16, k.data(), v.data(),
                      2, 32);
    }
    EXPECT_NE(std::memcmp(before.data(), k_tile, k_bytes), 0) << name << ": nothing was written";
    for (KvKind kind : {KvKind::kKey, KvKind::kValue}) {
      const auto* a = plain.cache.storage().tile(0, kind, BlockId(block));
      const auto* b = traced.cache.storage().tile(0, kind, BlockId(block));
      EXPECT_EQ(std::memcmp(a, b, plain.cache.storage().layout().tile_bytes(kind)), 0) << name;
    }
    ASSERT_EQ(r.launches.size(), code == kKvInt4 ? 2u : 1u) << name;
    for (const sim::TraceLaunch& l : r.launches) {
      EXPECT_FALSE(l.accesses.empty()) << name;
      ASSERT_FALSE(l.roles.empty()) << name;
      for (const sim::TraceRole& role : l.roles) {
        EXPECT_EQ(role.slot_begin, slot);
        EXPECT_EQ(role.table.back(), block);
      }
      const sim::KernelTrace t = sim::summarize_launch(l);
      for (const sim::ThreadBlockTrace& tb : t.blocks) {
        EXPECT_EQ(tb.kv_blocks, std::vector<int>{block}) << name;
        EXPECT_TRUE(tb.stray_blocks.empty()) << name;
      }
    }
  }
}

TEST(KernelTrace, NothingIsRecordedWithoutARecorderOutsideTheSelectionOrFromAnotherThread) {
  Batch batch("fp16", kKvF16, 16, 40, 4, 2, 32);
  sim::TraceRecorder r;
  r.select = [](const std::string& kernel, int) { return kernel != "decode_split_batch_kernel"; };
  {
    sim::ScopedRecorder on(r);
    batch.run(true);
  }
  ASSERT_EQ(r.launches.size(), 2u);  // the splits and their reduction
  EXPECT_EQ(r.launches[0].kernel, "decode_split_batch_kernel");
  EXPECT_FALSE(r.launches[0].recorded);
  EXPECT_TRUE(r.launches[0].accesses.empty());
  EXPECT_TRUE(r.launches[0].roles.empty());
  EXPECT_EQ(r.launches[1].kernel, "decode_reduce_kernel");
  EXPECT_TRUE(r.launches[1].recorded);
  batch.run(true);  // no recorder installed: nothing anywhere to record into
  EXPECT_EQ(r.launches.size(), 2u);
  // Another thread's launches (another run's worker) are not this recorder's.
  sim::TraceRecorder mine;
  {
    sim::ScopedRecorder on(mine);
    std::thread other([&] { batch.run(false); });
    other.join();
  }
  EXPECT_TRUE(mine.launches.empty());
}

// Each thread block declares its query, KV head and split, and reads exactly the KV blocks of
// that query's table that cover its slots, in both kernels, block sizes 1 and 16.
TEST(KernelTrace, EachThreadBlockReadsExactlyItsOwnBlockTable) {
  for (int block_size : {1, 16}) {
    for (bool decode : {false, true}) {
      Batch batch("fp16", kKvF16, block_size, 300, 8, 2, 32);
      sim::TraceRecorder r;
      {
        sim::ScopedRecorder on(r);
        batch.run(decode);
      }
      const std::string name =
          decode ? "decode_split_batch_kernel" : "paged_attention_batch_kernel";
      const sim::KernelTrace k = sim::summarize_launch(launch_named(r, name));
      const std::string what = name + " block size " + std::to_string(block_size);
      int with_slots = 0;
      for (const sim::ThreadBlockTrace& tb : k.blocks) {
        ASSERT_TRUE(tb.role.has_value()) << what << " block " << tb.block;
        const sim::TraceRole& role = *tb.role;
        const std::vector<int> table = batch.table_of(role.query);
        EXPECT_EQ(role.table, table) << what << " block " << tb.block;
        EXPECT_TRUE(tb.stray_blocks.empty()) << what << " block " << tb.block;
        std::vector<int> want;
        if (role.slot_end > role.slot_begin)
          for (int lb = role.slot_begin / block_size; lb <= (role.slot_end - 1) / block_size; ++lb)
            want.push_back(table[static_cast<std::size_t>(lb)]);
        EXPECT_EQ(tb.kv_blocks, want)
            << what << " block " << tb.block << " query " << role.query << " split " << role.split;
        if (!want.empty()) ++with_slots;
        if (decode) {
          EXPECT_EQ(role.heads, 4) << what;  // GQA: one block serves the KV head's 4 query heads
          EXPECT_EQ(role.head_first, role.kv_head * 4) << what;
        } else {
          EXPECT_EQ(role.heads, 1) << what;
          EXPECT_EQ(role.kv_head, role.head_first / 4) << what;
        }
      }
      EXPECT_GT(with_slots, 0) << what;
    }
  }
}

// The decode kernels read each row of a query's context once per KV head: the bytes asked for
// are context x KV heads x head_dim x bytes per value, for K and for V, plus (int8) one 2-byte
// scale per token per KV head; the paged kernel, one block per query head, asks for the same
// rows once per query head (4 query heads share a KV head here), and the distinct bytes are the
// distinct rows the queries cover in both.
TEST(KernelTrace, BytesReadAreTheContextsRows) {
  const int heads = 8, kv_heads = 2, head_dim = 32;
  for (const auto& [name, code, value_bytes, scale_bytes] :
       {std::tuple{"fp16", kKvF16, 2, 0}, std::tuple{"int8", kKvInt8, 1, 2},
        std::tuple{"fp32", kKvF32, 4, 0}}) {
    Batch batch(name, code, 16, 200, heads, kv_heads, head_dim);
    long context = 0;
    for (int s : batch.slots) context += s;  // the three queries' slots
    const long rows = context * kv_heads;
    const long want = 2 * rows * (head_dim * value_bytes + scale_bytes);  // K and V
    std::set<std::pair<int, int>> distinct_rows;
    for (int i = 0; i < 3; ++i) {
      const std::vector<int> table = batch.table_of(i);
      for (int t = 0; t < batch.slots[static_cast<std::size_t>(i)]; ++t)
        distinct_rows.emplace(table[static_cast<std::size_t>(t / 16)], t % 16);
    }
    for (bool decode : {true, false}) {
      sim::TraceRecorder r;
      {
        sim::ScopedRecorder on(r);
        batch.run(decode);
      }
      const sim::KernelTrace k = sim::summarize_launch(
          launch_named(r, decode ? "decode_split_batch_kernel" : "paged_attention_batch_kernel"));
      const std::string what = std::string(name) + (decode ? " decode" : " paged");
      const long per_head_reads = decode ? 1 : heads / kv_heads;
      // Bytes read: each warp load's distinct bytes (the decode kernel's lanes of one token all
      // load its scale: one broadcast, asked for by each lane).
      if (scale_bytes == 0 || decode) {
        // (The paged kernel loads an int8 value's scale with each value: more than the rows.)
        EXPECT_EQ(k.kv.distinct_bytes, want * per_head_reads) << what;
      }
      if (decode && scale_bytes > 0) {
        EXPECT_EQ(k.by_what[sim::kTraceKScales].bytes, rows * scale_bytes * (head_dim / 8)) << what;
      }
      EXPECT_EQ(k.by_what[sim::kTraceKCodes].bytes, rows * head_dim * value_bytes * per_head_reads)
          << what;
      EXPECT_EQ(k.by_what[sim::kTraceVCodes].bytes, rows * head_dim * value_bytes * per_head_reads)
          << what;
      // Distinct bytes: the distinct (physical block, row) pairs the queries cover (query 2 is
      // A's first slot again; B's reversed table reaches A's last blocks), each row once.
      EXPECT_EQ(k.kv_unique_bytes, static_cast<long>(distinct_rows.size()) * 2 * kv_heads *
                                       (head_dim * value_bytes + scale_bytes))
          << what;
    }
  }
}

// Each (warp, what, key) is one load instruction: its lanes are different threads loading the
// same number of bytes. Over block sizes whose int8 tiles are not 8-byte aligned (68 bytes at
// block size 1: some rows take the vector load, others value by value, in one warp), a live map
// whose evicted slots some lanes skip, the value loop's head blocks, and both kernels.
TEST(KernelTrace, EveryKeyIsOneLoadInstruction) {
  struct Case {
    const char* format;
    int code, block_size, heads, kv_heads, head_dim;
  };
  const Case cases[] = {{"int8", kKvInt8, 1, 8, 2, 32},  {"int8", kKvInt8, 3, 8, 2, 32},
                        {"fp16", kKvF16, 16, 16, 4, 64}, {"fp32", kKvF32, 5, 8, 2, 16},
                        {"int4", kKvInt4, 16, 8, 2, 32}, {"int2", kKvInt2, 1, 4, 4, 16}};
  bool both_paths = false;
  for (const Case& c : cases) {
    for (bool decode : {false, true}) {
      if (decode && (c.code == kKvInt4 || c.code == kKvInt2)) continue;
      Batch batch(c.format, c.code, c.block_size, 150, c.heads, c.kv_heads, c.head_dim, true);
      sim::TraceRecorder r;
      {
        sim::ScopedRecorder on(r);
        batch.run(decode);
      }
      const std::string what = std::string(c.format) + " block " + std::to_string(c.block_size) +
                               (decode ? " decode" : " paged");
      const sim::TraceLaunch& l = r.launches.front();
      ASSERT_TRUE(l.recorded) << what;
      std::map<std::tuple<std::uint32_t, std::uint32_t, std::uint32_t, std::uint64_t>,
               std::pair<std::set<std::uint32_t>, std::set<std::uint32_t>>>
          instructions;  // -> (threads, byte sizes)
      long vector_k = 0, scalar_k = 0;
      for (const sim::TraceAccess& a : l.accesses) {
        auto& [threads, sizes] = instructions[{a.block, a.thread / 32, a.what, a.key}];
        EXPECT_TRUE(threads.insert(a.thread).second)
            << what << ": thread " << a.thread << " twice in one instruction";
        sizes.insert(a.bytes);
        if (a.what == sim::kTraceKCodes) (a.bytes == 8 ? vector_k : scalar_k) += 1;
      }
      for (const auto& [key, v] : instructions)
        EXPECT_EQ(v.second.size(), 1u) << what << ": one instruction, lanes of different sizes";
      if (decode && c.code == kKvInt8 && c.block_size == 1)
        both_paths = vector_k > 0 && scalar_k > 0;
    }
  }
  EXPECT_TRUE(both_paths) << "int8 at block size 1 should take both the vector and the "
                             "value-by-value path in the decode kernel";
}

// The warp loads' transactions, counted by hand from the layout.
TEST(KernelTrace, TransactionsOfAWarpsLoadsByHand) {
  // fp16, one KV head of 64 values: a token's row is 128 bytes, 128-byte aligned in its tile.
  Batch batch("fp16", kKvF16, 16, 64, 2, 1, 64);
  ASSERT_EQ(reinterpret_cast<std::uintptr_t>(batch.b.k.base) % 128, 0u);
  ASSERT_EQ(batch.b.k.tile_bytes % 128, 0);
  for (bool decode : {false, true}) {
    sim::TraceRecorder r;
    {
      sim::ScopedRecorder on(r);
      batch.run(decode);
    }
    const sim::TraceLaunch& l =
        launch_named(r, decode ? "decode_split_batch_kernel" : "paged_attention_batch_kernel");
    const std::vector<sim::WarpLoad> loads = sim::warp_loads(l, 0, 100000);
    const auto first = std::find_if(loads.begin(), loads.end(), [](const sim::WarpLoad& w) {
      return w.what == sim::kTraceKCodes && w.warp == 0;
    });
    ASSERT_NE(first, loads.end());
    EXPECT_EQ(first->lanes, 32);
    if (!decode) {
      // Thread per slot: lane i reads value 0 of slot i, 2 bytes at a 128-byte stride. Every lane
      // is its own sector and line: 32 sectors where 64 bytes fit in 2, 32 lines for 1.
      EXPECT_EQ(first->bytes_per_lane, 2u);
      EXPECT_EQ(first->traffic.bytes, 64);
      EXPECT_EQ(first->traffic.sectors, 32);
      EXPECT_EQ(first->traffic.ideal_sectors, 2);
      EXPECT_EQ(first->traffic.lines, 32);
      EXPECT_EQ(first->traffic.ideal_lines, 1);
      // Values: lane d reads value d of one slot, 64 contiguous bytes: 2 sectors, the ideal.
      const auto v = std::find_if(loads.begin(), loads.end(), [](const sim::WarpLoad& w) {
        return w.what == sim::kTraceVCodes && w.warp == 0;
      });
      ASSERT_NE(v, loads.end());
      EXPECT_EQ(v->traffic.sectors, 2);
      EXPECT_EQ(v->traffic.ideal_sectors, 2);
    } else {
      // 8 lanes per token, 16 bytes each; a warp takes 4 consecutive tokens: 512 contiguous
      // bytes, 16 sectors and 4 lines, the ideal.
      EXPECT_EQ(first->bytes_per_lane, 16u);
      EXPECT_EQ(first->traffic.bytes, 512);
      EXPECT_EQ(first->traffic.sectors, 16);
      EXPECT_EQ(first->traffic.ideal_sectors, 16);
      EXPECT_EQ(first->traffic.lines, 4);
      EXPECT_EQ(first->traffic.ideal_lines, 4);
    }
    const sim::KernelTrace k = sim::summarize_launch(l);
    if (decode)
      EXPECT_EQ(k.kv.sectors, k.kv.ideal_sectors);  // every load coalesced
    else
      EXPECT_GT(k.kv.sectors, 4 * k.kv.ideal_sectors);  // K's thread-per-slot loads are not
  }
}

// traffic_of by hand: a broadcast counts its bytes once; a range across a sector boundary
// touches both.
TEST(KernelTrace, TrafficCountsSectorsLinesAndDistinctBytes) {
  const sim::Traffic broadcast = sim::traffic_of({{256, 4}, {256, 4}, {256, 4}});
  EXPECT_EQ(broadcast.bytes, 12);
  EXPECT_EQ(broadcast.distinct_bytes, 4);
  EXPECT_EQ(broadcast.sectors, 1);
  EXPECT_EQ(broadcast.ideal_sectors, 1);
  const sim::Traffic straddle = sim::traffic_of({{30, 4}});
  EXPECT_EQ(straddle.sectors, 2);
  EXPECT_EQ(straddle.ideal_sectors, 1);
  EXPECT_EQ(straddle.lines, 1);
  const sim::Traffic overlap = sim::traffic_of({{0, 16}, {8, 16}, {128, 8}});
  EXPECT_EQ(overlap.distinct_bytes, 32);
  EXPECT_EQ(overlap.sectors, 2);
  EXPECT_EQ(overlap.ideal_sectors, 1);
  EXPECT_EQ(overlap.lines, 2);
}

}  // namespace
}  // namespace kvscope::kernels
