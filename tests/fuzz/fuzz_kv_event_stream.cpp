// libFuzzer target: the live KV-event payload decoder (vLLM / SGLang msgpack EventBatch), the
// block model it feeds and the prefix lookup over it. Any input must end in a decode error or a
// batch; a decoded batch applied to a KvEventModel must keep its counters consistent, build a
// recording that replays, and answer a lookup whose rows stay within the prompt.
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

#include "engine/common/error.h"
#include "engine/trace/kv_event_model.h"
#include "engine/trace/kv_event_stream.h"
#include "tests/fuzz/fuzz_support.h"

using kvscope::fuzz::check;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view payload(reinterpret_cast<const char*>(data), size);
  kvscope::KvEventBatch batch;
  std::string error;
  if (!kvscope::decode_kv_event_batch(payload, batch, error)) {
    check(!error.empty() && error.find('\n') == std::string::npos, "a one-line decode error");
    check(batch.events.empty(), "a failed decode leaves no events");
    return 0;
  }
  check(error.empty(), "no error on success");
  for (const kvscope::KvStreamEvent& e : batch.events) {
    if (e.kind == kvscope::KvEventKind::kBlockStored) {
      check(e.block_size >= 0, "block size >= 0 (0: a placeholder)");
      check(e.block_tokens.empty() || e.block_tokens.size() == e.block_hashes.size(),
            "token prints: none or one per block");
      check(e.block_extra.empty() || e.block_extra.size() == e.block_hashes.size(),
            "extra keys: none or one per block");
    }
    if (e.kind == kvscope::KvEventKind::kAllBlocksCleared)
      check(e.block_hashes.empty(), "a clear names no blocks");
    check(e.group_idx >= 0, "group index >= 0");
  }
  // The batch twice, on two ranks, with a restart between: live counts stay consistent.
  kvscope::KvModelLimits limits;
  limits.max_live_blocks = 64;  // small caps: the fuzzer reaches them
  limits.max_recorded_events = 256;
  kvscope::KvEventModel model(limits);
  const int rank = batch.dp_rank ? static_cast<int>(*batch.dp_rank) : 0;
  model.apply(rank, batch);
  model.restart(rank);
  model.apply(rank, batch);
  model.apply((rank + 1) % 65536, batch);
  const kvscope::KvModelCounters& t = model.totals();
  std::int64_t by_rank = 0, by_medium = 0;
  for (const auto& [r, c] : model.by_rank()) {
    check(c.live >= 0 && c.live <= c.peak_live, "rank live within [0, peak]");
    by_rank += c.live;
  }
  for (const auto& [m, n] : model.live_by_medium()) by_medium += n;
  check(t.live == by_rank && t.live == by_medium, "live = sum by rank = sum by medium");
  check(t.live <= static_cast<std::int64_t>(limits.max_live_blocks), "live within the cap");
  check(t.batches == 3, "three batches");
  check(t.blocks_removed + t.unknown_removals >= 0, "removal counts");
  // A lookup of the first stored event's tokens (as ids 0..: the corpus's) and of a short prompt.
  for (std::size_t n : {std::size_t{3}, std::size_t{64}}) {
    kvscope::KvLookupQuery q;
    for (std::size_t i = 0; i < n; ++i) q.tokens.push_back(static_cast<std::int64_t>(i));
    for (const kvscope::KvLookupRow& r : model.lookup(q)) {
      check(r.matched_blocks >= 0 && r.matched_blocks <= r.prompt_blocks, "matched <= prompt");
      check(r.matched_tokens <= r.prompt_tokens, "matched tokens <= prompt tokens");
      check(r.slots.size() == static_cast<std::size_t>(r.matched_blocks), "a slot per match");
      check(!kvscope::kv_lookup_text(r, model.last_ts()).empty(), "a sentence per row");
    }
  }
  try {
    const kvscope::Timeline tl = model.build_timeline("fuzz");
    check(tl.num_steps() == static_cast<int>(model.recorded_batches()), "a step per batch");
    if (tl.num_steps() > 0) {
      const kvscope::PoolState s = tl.state_at(tl.num_steps() - 1);
      std::int64_t cached = 0;
      for (const kvscope::BlockState& b : s.blocks) cached += b.cached ? 1 : 0;
      if (!model.recording_truncated()) check(cached == t.live, "replayed pool = live blocks");
    }
  } catch (const kvscope::Error& e) {
    std::fprintf(stderr, "build_timeline: %s\n", e.what());
    check(false, "the recording of a decoded batch replays");
  }
  return 0;
}
