// decode_kv_event_batch: both layouts, every hash form, nil and absent fields, unknown tags and
// keys skipped and counted, and malformed or hostile payloads refused with a one-line reason.
#include "engine/trace/kv_event_stream.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "tests/trace/kv_event_payloads.h"

namespace kvscope {
namespace {

using test::batch_array;
using test::cleared_array;
using test::digest;
using test::Packer;
using test::removed_array;
using test::stored_array;

KvEventBatch decode_ok(const std::string& payload) {
  KvEventBatch b;
  std::string error;
  EXPECT_TRUE(decode_kv_event_batch(payload, b, error)) << error;
  EXPECT_EQ(error, "");
  return b;
}

std::string decode_error(const std::string& payload, const KvDecodeLimits& limits = {}) {
  KvEventBatch b;
  b.events.resize(3);  // must come back cleared
  std::string error;
  EXPECT_FALSE(decode_kv_event_batch(payload, b, error, limits));
  EXPECT_TRUE(b.events.empty());
  EXPECT_EQ(error.find('\n'), std::string::npos) << "one line: " << error;
  return error;
}

TEST(KvEventStream, PositionalBlockStoredWithEveryField) {
  // vLLM's newest positional BlockStored: all twelve fields, group 1, sliding window nil.
  Packer ev;
  ev.array(12).str("BlockStored").hashes({std::uint64_t{UINT64_MAX}, std::uint64_t{7}}).nil();
  ev.tokens(32).i64(16).i64(3).str("CPU").str("my-lora");
  ev.array(2).array(1).str("mm-hash").nil();  // extra_keys: any shape
  ev.i64(1).str("full_attention").nil();
  const KvEventBatch b = decode_ok(batch_array(1700000000.5, {ev.bytes()}, 2));
  EXPECT_DOUBLE_EQ(b.ts, 1700000000.5);
  ASSERT_TRUE(b.dp_rank.has_value());
  EXPECT_EQ(*b.dp_rank, 2);
  ASSERT_EQ(b.events.size(), 1u);
  const KvStreamEvent& e = b.events[0];
  EXPECT_EQ(e.kind, KvEventKind::kBlockStored);
  EXPECT_EQ(e.block_hashes, (std::vector<std::uint64_t>{UINT64_MAX, 7}));
  EXPECT_FALSE(e.parent_hash.has_value());
  EXPECT_EQ(e.num_token_ids, 32);
  EXPECT_EQ(e.block_size, 16);
  EXPECT_EQ(e.lora_id, 3);
  EXPECT_EQ(e.medium, "CPU");
  EXPECT_EQ(e.lora_name, "my-lora");
  EXPECT_EQ(e.group_idx, 1);
  EXPECT_EQ(e.spec_kind, "full_attention");
  EXPECT_FALSE(e.sliding_window.has_value());
  EXPECT_EQ(b.skipped_fields, 0);
  EXPECT_EQ(b.skipped_events, 0);
}

TEST(KvEventStream, SGLangLayoutShortFieldsAndSignedHashes) {
  // SGLang: [ts, events] (no rank), BlockStored of six fields, BlockRemoved of two, int64 hashes.
  const KvEventBatch b = decode_ok(
      batch_array(12.0, {stored_array({std::int64_t{-5}, std::int64_t{9}}, std::int64_t{-77}, 4),
                         removed_array({std::int64_t{-5}}), cleared_array()}));
  EXPECT_FALSE(b.dp_rank.has_value());
  ASSERT_EQ(b.events.size(), 3u);
  EXPECT_EQ(b.events[0].kind, KvEventKind::kBlockStored);
  // Two's complement: SGLang's -5 and a uint64 0xFF..FB name the same block.
  EXPECT_EQ(b.events[0].block_hashes, (std::vector<std::uint64_t>{0xFFFFFFFFFFFFFFFBull, 9}));
  EXPECT_EQ(b.events[0].parent_hash, static_cast<std::uint64_t>(-77));
  EXPECT_EQ(b.events[0].num_token_ids, 8);
  EXPECT_EQ(b.events[0].medium, "");  // absent
  EXPECT_EQ(b.events[0].group_idx, 0);
  EXPECT_FALSE(b.events[0].lora_id.has_value());
  EXPECT_EQ(b.events[1].kind, KvEventKind::kBlockRemoved);
  EXPECT_EQ(b.events[1].block_hashes, (std::vector<std::uint64_t>{0xFFFFFFFFFFFFFFFBull}));
  EXPECT_EQ(b.events[2].kind, KvEventKind::kAllBlocksCleared);
  EXPECT_TRUE(b.events[2].block_hashes.empty());
}

TEST(KvEventStream, TaggedMapLayoutWithBytesHashesAndUnknownKeys) {
  // Newer vLLM: the batch and its events are maps; sha256 digests as raw bytes; fields with
  // default values omitted; keys this decoder does not know are skipped and counted.
  Packer p;
  p.map(4).str("ts").f64(3.25).str("events").array(2);
  p.map(9).str("type").str("BlockStored");
  p.str("block_hashes").array(2).bin(digest(0x0102030405060708)).bin(digest(42));
  p.str("parent_block_hash").bin(digest(0xdeadbeef, 0x11));
  p.str("token_ids").tokens(32).str("block_size").i64(16).str("lora_id").nil();
  p.str("medium").str("GPU").str("lora_name").nil();
  p.str("a_future_key").array(1).i64(1);
  p.map(4).str("medium").nil().str("block_hashes").array(1).bin(digest(42));
  p.str("type").str("BlockRemoved").str("group_idx").i64(2);
  p.str("data_parallel_rank").i64(1).str("batch_extra").nil();
  const KvEventBatch b = decode_ok(p.bytes());
  EXPECT_DOUBLE_EQ(b.ts, 3.25);
  EXPECT_EQ(b.dp_rank, 1);
  ASSERT_EQ(b.events.size(), 2u);
  EXPECT_EQ(b.events[0].kind, KvEventKind::kBlockStored);
  EXPECT_EQ(b.events[0].block_hashes, (std::vector<std::uint64_t>{0x0102030405060708ull, 42}));
  EXPECT_EQ(b.events[0].parent_hash, 0xdeadbeefull);
  EXPECT_EQ(b.events[0].medium, "GPU");
  EXPECT_EQ(b.events[0].block_size, 16);
  EXPECT_EQ(b.events[1].kind, KvEventKind::kBlockRemoved);
  EXPECT_EQ(b.events[1].group_idx, 2);
  EXPECT_EQ(b.events[1].medium, "");
  EXPECT_EQ(b.skipped_fields, 2);  // a_future_key, batch_extra
}

// vLLM 0.33's BlockStored as its msgspec struct encodes it (a tagged map, nil fields omitted),
// with every field it has: none is skipped, each lands where kvscope shows it.
TEST(KvEventStream, Vllm033FieldsAreReadNotSkipped) {
  Packer p;
  p.array(3).f64(7.5).array(2);
  p.map(16).str("type").str("BlockStored");
  p.str("block_hashes").array(2).bin(digest(5)).u64(0xF000000000000001ull);
  p.str("parent_block_hash").nil().str("token_ids").tokens(32).str("block_size").i64(16);
  p.str("lora_id").nil().str("medium").str("CPU").str("lora_name").str("sql");
  p.str("extra_keys").array(2).array(1).str("sql");                // block 0: only the LoRA name
  p.array(3).str("sql").array(2).str("img-7").i64(0).str("salt");  // block 1: an image, a salt
  p.str("group_idx").i64(1).str("kv_cache_spec_kind").str("sliding_window");
  p.str("kv_cache_spec_sliding_window").i64(4096).str("locality").str("REMOTE");
  p.str("ownership").str("lmcache").str("session_id").str("s-1");
  p.str("lookahead_token_ids").array(2).array(1).i64(9).array(0);
  p.map(5).str("type").str("BlockRemoved").str("block_hashes").array(1).bin(digest(5));
  p.str("medium").str("CPU").str("locality").str("LOCAL").str("ownership").str("lmcache");
  p.i64(3);
  const KvEventBatch b = decode_ok(p.bytes());
  EXPECT_EQ(b.skipped_fields, 0);
  EXPECT_EQ(b.dp_rank, 3);
  ASSERT_EQ(b.events.size(), 2u);
  const KvStreamEvent& s = b.events[0];
  EXPECT_EQ(s.block_hashes, (std::vector<std::uint64_t>{5, 0xF000000000000001ull}));
  EXPECT_EQ(s.group_idx, 1);
  EXPECT_EQ(s.spec_kind, "sliding_window");
  EXPECT_EQ(s.sliding_window, 4096);
  EXPECT_EQ(s.locality, "REMOTE");
  EXPECT_EQ(s.ownership, "lmcache");
  EXPECT_EQ(s.session_id, "s-1");
  EXPECT_EQ(s.lora_name, "sql");
  // Tokens per block: 0..15 and 16..31 (Packer::tokens counts up).
  std::vector<std::int64_t> ids(32);
  for (int i = 0; i < 32; ++i) ids[static_cast<std::size_t>(i)] = i;
  EXPECT_EQ(s.block_tokens,
            (std::vector<std::uint64_t>{kv_token_fingerprint(ids.data(), 16),
                                        kv_token_fingerprint(ids.data() + 16, 16)}));
  ASSERT_EQ(s.block_extra.size(), 2u);
  EXPECT_EQ(s.block_extra[0], 0u);  // the LoRA name alone adds nothing to the namespace
  EXPECT_NE(s.block_extra[1], 0u);
  EXPECT_EQ(b.events[1].locality, "LOCAL");
  EXPECT_EQ(b.events[1].ownership, "lmcache");
}

// Offload tiers report which hashes they hold: token_ids [] and block_size 0 are placeholders.
TEST(KvEventStream, PlaceholderStoresCarryNoTokens) {
  Packer p;
  p.map(6).str("type").str("BlockStored").str("block_hashes").array(2).u64(1).u64(2);
  p.str("parent_block_hash").nil().str("token_ids").array(0).str("block_size").i64(0);
  p.str("medium").str("STORAGE");
  const KvEventBatch b = decode_ok(batch_array(1, {p.bytes()}));
  ASSERT_EQ(b.events.size(), 1u);
  EXPECT_EQ(b.events[0].block_size, 0);
  EXPECT_TRUE(b.events[0].block_tokens.empty());
  // Token ids that do not fill one block per hash: kept as a count, no per-block prints.
  const KvEventBatch odd = decode_ok(batch_array(1, {stored_array({1, 2}, std::nullopt, 16)}));
  EXPECT_EQ(odd.events[0].block_tokens.size(), 2u);
  Packer q;
  q.array(5).str("BlockStored").array(2).u64(1).u64(2).nil().tokens(20).i64(16);
  EXPECT_TRUE(decode_ok(batch_array(1, {q.bytes()})).events[0].block_tokens.empty());
}

// SGLang 0.5.23: negative int64 hashes, its media, cache_salt and session_id.
TEST(KvEventStream, Sglang0523FieldsAreReadNotSkipped) {
  Packer p;
  p.map(9).str("type").str("BlockStored").str("block_hashes").array(1).i64(-5);
  p.str("parent_block_hash").i64(-4).str("token_ids").tokens(1).str("block_size").i64(1);
  p.str("lora_id").nil().str("medium").str("CPU_PINNED").str("cache_salt").str("tenant-a");
  p.str("session_id").str("chat-9");
  const KvEventBatch b = decode_ok(batch_array(2, {p.bytes()}, 0));
  EXPECT_EQ(b.skipped_fields, 0);
  EXPECT_EQ(b.events[0].block_hashes, (std::vector<std::uint64_t>{static_cast<std::uint64_t>(-5)}));
  EXPECT_EQ(b.events[0].medium, "CPU_PINNED");
  EXPECT_EQ(b.events[0].cache_salt, "tenant-a");
  EXPECT_EQ(b.events[0].session_id, "chat-9");
}

TEST(KvEventStream, AnIntHashAndItsBytesFormNameTheSameBlock) {
  // vLLM with VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES publishes the low 64 bits of the digest
  // (its last 8 bytes, big-endian): kvscope keys a bytes hash the same way.
  const std::uint64_t low = 0x8877665544332211ull;
  const KvEventBatch as_bytes = decode_ok(batch_array(0, {removed_array({digest(low)})}));
  const KvEventBatch as_int = decode_ok(batch_array(0, {removed_array({low})}));
  EXPECT_EQ(as_bytes.events[0].block_hashes, as_int.events[0].block_hashes);
  // Shorter than 8 bytes: the bytes there are, big-endian.
  const KvEventBatch short_hash =
      decode_ok(batch_array(0, {removed_array({std::string("\x01\x02", 2)})}));
  EXPECT_EQ(short_hash.events[0].block_hashes, (std::vector<std::uint64_t>{0x0102}));
}

TEST(KvEventStream, UnknownEventTypesAndTrailingFieldsAreSkippedAndCounted) {
  Packer future_event;
  future_event.array(3).str("KVCacheMetrics").i64(1).i64(2);
  Packer future_map;
  future_map.map(1).str("type").str("BlockPinned");
  Packer long_removed;  // a fifth positional field, added by some later engine
  long_removed.array(5).str("BlockRemoved").array(1).u64(9).str("GPU").i64(0).str("x");
  Packer long_cleared;
  long_cleared.array(2).str("AllBlocksCleared").nil();
  const KvEventBatch b = decode_ok(batch_array(
      0, {future_event.bytes(), future_map.bytes(), long_removed.bytes(), long_cleared.bytes()}));
  EXPECT_EQ(b.skipped_events, 2);
  EXPECT_EQ(b.skipped_fields, 2);
  ASSERT_EQ(b.events.size(), 2u);
  EXPECT_EQ(b.events[0].block_hashes, (std::vector<std::uint64_t>{9}));
  EXPECT_EQ(b.events[0].medium, "GPU");
  EXPECT_EQ(b.events[1].kind, KvEventKind::kAllBlocksCleared);
}

TEST(KvEventStream, FourByteAndIntegerTimestampsAndNilRankAreAccepted) {
  Packer p;
  p.array(3).i64(1700000000).array(0).nil();
  const KvEventBatch b = decode_ok(p.bytes());
  EXPECT_DOUBLE_EQ(b.ts, 1700000000.0);
  EXPECT_FALSE(b.dp_rank.has_value());
  EXPECT_TRUE(b.events.empty());
}

struct BadPayload {
  const char* name;
  std::string payload;
  const char* error;  // a substring of the one-line reason
};

std::vector<BadPayload> bad_payloads() {
  std::vector<BadPayload> v;
  v.push_back({"empty", "", "expected a msgpack EventBatch, got an empty payload"});
  v.push_back({"reserved type byte", "\xc1", "not msgpack (bad type byte at byte 0)"});
  {
    Packer p;
    p.array(3).f64(1).array(0);  // the third element never comes
    v.push_back({"truncated", p.bytes(), "truncated msgpack"});
  }
  v.push_back({"trailing bytes", batch_array(0, {}) + "xy",
               "expected one msgpack value, got 2 more bytes after it"});
  {
    Packer p;
    p.i64(5);
    v.push_back({"root integer", p.bytes(), "batch: expected an EventBatch (array or map), got 5"});
  }
  {
    Packer p;
    p.array(1).f64(1);
    v.push_back({"batch of one", p.bytes(),
                 "batch: expected [ts, events] or [ts, events, data_parallel_rank], got an array "
                 "of 1"});
  }
  {
    Packer p;
    p.array(2).f64(1).str("no");
    v.push_back({"events not an array", p.bytes(),
                 "batch: events: expected an array of events, got the string \"no\""});
  }
  {
    Packer p;
    p.array(2).str("t").array(0);
    v.push_back({"ts a string", p.bytes(), "batch: ts: expected a float timestamp"});
  }
  {
    Packer ev;
    ev.array(5).str("BlockStored").array(2).u64(1).f64(2.5).nil().tokens(32).i64(16);
    v.push_back({"float hash", batch_array(0, {ev.bytes()}),
                 "events[0]: block_hashes[1]: expected an integer or bytes hash, got a float"});
  }
  {
    Packer ev;
    ev.array(2).str("BlockRemoved").array(1).str("abc");
    v.push_back({"string hash", batch_array(0, {removed_array({1}), ev.bytes()}),
                 "events[1]: block_hashes[0]: expected an integer or bytes hash, got the string "
                 "\"abc\""});
  }
  v.push_back({"empty bytes hash", batch_array(0, {removed_array({std::string()})}),
               "events[0]: block_hashes[0]: expected a non-empty bytes hash, got 0 bytes"});
  {
    Packer ev;  // tokens but no block size: not a placeholder
    ev.array(5).str("BlockStored").array(1).u64(1).nil().tokens(16).i64(0);
    v.push_back({"block size 0 with tokens", batch_array(0, {ev.bytes()}),
                 "events[0]: block_size: expected a positive block size for 16 token ids, got 0"});
  }
  {
    Packer ev;
    ev.array(5).str("BlockStored").array(1).u64(1).nil().tokens(0).i64(-1);
    v.push_back({"block size negative", batch_array(0, {ev.bytes()}),
                 "events[0]: block_size: expected a block size >= 0, got -1"});
  }
  {
    Packer ev;
    ev.map(5).str("type").str("BlockStored").str("block_hashes").array(2).u64(1).u64(2);
    ev.str("token_ids").tokens(32).str("block_size").i64(16);
    ev.str("extra_keys").array(1).nil();
    v.push_back({"extra_keys per block", batch_array(0, {ev.bytes()}),
                 "events[0]: extra_keys: expected one entry per block hash (2), got 1"});
  }
  {
    Packer ev;
    ev.array(5).str("BlockStored").array(1).u64(1).nil().array(3).i64(1).i64(2).str("x").i64(16);
    v.push_back({"token id a string", batch_array(0, {ev.bytes()}),
                 "events[0]: token_ids[2]: expected an integer token id, got the string \"x\""});
  }
  {
    Packer ev;
    ev.array(3).str("BlockStored").array(1).u64(1).nil();
    v.push_back({"positional store without tokens", batch_array(0, {ev.bytes()}),
                 "events[0]: token_ids: missing"});
  }
  {
    Packer ev;
    ev.array(1).str("BlockRemoved");
    v.push_back({"removal without hashes", batch_array(0, {ev.bytes()}),
                 "events[0]: block_hashes: missing"});
  }
  {
    Packer ev;
    ev.map(1).str("block_hashes").array(0);
    v.push_back(
        {"map event without type", batch_array(0, {ev.bytes()}), "events[0]: type: missing"});
  }
  {
    Packer ev;
    ev.map(2).str("type").str("BlockStored").str("block_hashes").array(0);
    v.push_back({"map store without token_ids", batch_array(0, {ev.bytes()}),
                 "events[0]: token_ids: missing"});
  }
  {
    Packer ev;
    ev.array(3).i64(7).array(0).nil();
    v.push_back({"integer tag", batch_array(0, {ev.bytes()}),
                 "events[0]: type: expected a string tag, got 7"});
  }
  {
    Packer p;
    p.map(1).str("ts").f64(1);
    v.push_back({"map batch without events", p.bytes(), "batch: events: missing"});
  }
  v.push_back({"negative rank", batch_array(0, {}, -1),
               "batch: data_parallel_rank: expected a rank in [0, 65535], got -1"});
  {
    Packer ev;
    ev.array(3).str("BlockRemoved").array(1).u64(1).i64(3);
    v.push_back({"medium an integer", batch_array(0, {ev.bytes()}),
                 "events[0]: medium: expected a string or nil, got 3"});
  }
  {
    Packer ev;
    ev.array(4).str("BlockRemoved").array(1).u64(1).nil().i64(-2);
    v.push_back({"negative group", batch_array(0, {ev.bytes()}),
                 "events[0]: group_idx: expected a group index in [0, 2^31), got -2"});
  }
  // Hostile sizes: declared counts no payload of that length could hold, refused before any
  // allocation (msgpack-cxx would otherwise reserve 24 bytes per declared element).
  v.push_back({"array32 of 4 billion", std::string("\xdd\xff\xff\xff\xff\x01", 6),
               "expected at most one element per payload byte, got an array declaring "
               "4294967295 elements in a payload of 6 bytes"});
  v.push_back({"map32 of 2 billion",
               std::string("\x92\xcb\0\0\0\0\0\0\0\0\xdf\x7f\xff\xff\xff", 15),
               "got a map declaring 4294967294 elements"});
  v.push_back({"nested too deep", std::string(100, '\x91') + "\xc0",
               "expected msgpack nested at most 16 deep"});
  return v;
}

TEST(KvEventStream, MalformedPayloadsAreRefusedWithAOneLineReason) {
  for (const BadPayload& bad : bad_payloads()) {
    SCOPED_TRACE(bad.name);
    const std::string error = decode_error(bad.payload);
    EXPECT_NE(error.find(bad.error), std::string::npos) << "got: " << error;
  }
}

TEST(KvEventStream, HostileSizesAreRefusedQuickly) {
  // 64 nested arrays each declaring as many elements as bytes remain: the budget pass stops it
  // at once (a decoder that allocated per declared element would reserve ~gigabytes here).
  std::string p;
  for (int i = 0; i < 64; ++i) p += std::string("\xdd\x00\x00\x10\x00", 5);
  const auto start = std::chrono::steady_clock::now();
  const std::string error = decode_error(p);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(1));
  EXPECT_NE(error.find("expected at most one element per payload byte"), std::string::npos)
      << error;
}

TEST(KvEventStream, LimitsAreTheCallers) {
  KvDecodeLimits small;
  small.max_payload_bytes = 8;
  const std::string p = batch_array(0, {removed_array({1, 2, 3})});
  EXPECT_EQ(decode_error(p, small),
            "expected a payload of at most 8 bytes, got " + std::to_string(p.size()));
  KvDecodeLimits short_strings;
  short_strings.max_string_bytes = 3;
  EXPECT_EQ(decode_error(batch_array(0, {removed_array({1}, "STORAGE")}), short_strings),
            "events[0]: medium: expected a string of at most 3 bytes, got 7 bytes");
}

TEST(KvEventStream, KindNamesAreTheEnginesTags) {
  EXPECT_EQ(kv_event_kind_name(KvEventKind::kBlockStored), "BlockStored");
  EXPECT_EQ(kv_event_kind_name(KvEventKind::kBlockRemoved), "BlockRemoved");
  EXPECT_EQ(kv_event_kind_name(KvEventKind::kAllBlocksCleared), "AllBlocksCleared");
}

}  // namespace
}  // namespace kvscope
