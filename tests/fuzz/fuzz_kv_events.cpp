// libFuzzer target: the vLLM / SGLang KV event JSON-lines importer. Bad lines must end in
// kvscope::Error; an accepted log must give consistent counts and block ids.
#include <cstdint>
#include <string_view>

#include "engine/common/error.h"
#include "engine/trace/kv_events_import.h"
#include "tests/fuzz/fuzz_support.h"

using kvscope::fuzz::check;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const kvscope::KvEventImport im = kvscope::parse_kv_events(text, "fuzz");
    check(im.cached_at_end >= 0 && im.peak_cached >= im.cached_at_end, "cached counts");
    check(im.blocks_stored >= static_cast<std::int64_t>(im.hashes.size()), "stored >= distinct");
    const auto num_ids = static_cast<std::int64_t>(im.hashes.size());
    check(im.cached_at_end <= num_ids, "cached <= distinct");
    std::int64_t allocated = 0, evicted = 0;
    for (const kvscope::Event& e : im.events) {
      (e.type == kvscope::EventType::kBlockAllocated ? allocated : evicted) += 1;
      check(e.block >= 0 && e.block < num_ids, "event block id is a dense id");
      check(e.step >= 0 && e.step < im.lines, "event step is a line index");
      if (e.type == kvscope::EventType::kBlockAllocated) {
        check(e.a >= -1 && e.a < num_ids && e.logical >= 0 && e.b > 0, "stored block fields");
      }
    }
    check(allocated == im.blocks_stored && evicted >= im.blocks_removed, "event counts");
  } catch (const kvscope::Error&) {
    return 0;
  }
  return 0;
}
