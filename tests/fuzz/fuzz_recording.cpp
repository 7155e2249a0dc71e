// libFuzzer target: Timeline::load on arbitrary recordings, then state_at at every step and a
// save/load round trip. The harness rewrites the trailing FNV-1a checksum so mutations reach the
// parser behind it. Bad files must end in kvscope::Error.
#include <cstdint>
#include <cstring>
#include <vector>

#include "engine/common/error.h"
#include "engine/trace/timeline.h"
#include "tests/fuzz/fuzz_support.h"

using kvscope::fuzz::check;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static kvscope::fuzz::ScratchFile in_file("recording_in");
  static kvscope::fuzz::ScratchFile out_file("recording_out");
  // Pools above 2^16 blocks are skipped (speed): a real one legitimately needs that much memory (x
  // 12 B).
  std::int32_t num_blocks = 0;
  if (size >= 16) std::memcpy(&num_blocks, data + 12, 4);
  if (num_blocks > (1 << 16)) return 0;
  std::vector<std::uint8_t> bytes(data, data + size);
  if (bytes.size() >= 8) {  // the recording's checksum: FNV-1a of every byte before it
    std::uint64_t h = 1469598103934665603ull;
    for (std::size_t i = 0; i + 8 < bytes.size(); ++i) h = (h ^ bytes[i]) * 1099511628211ull;
    for (int i = 0; i < 8; ++i)
      bytes[bytes.size() - 8 + i] = static_cast<std::uint8_t>(h >> (8 * i));
  }
  try {
    const kvscope::Timeline t = kvscope::Timeline::load(in_file.write(bytes.data(), bytes.size()));
    kvscope::PoolState state;
    for (int s = 0; s < t.num_steps(); ++s) {
      t.state_at(s, state);
      check(state.step == s, "state_at(step).step");
    }
    t.save(out_file.path());
    const kvscope::Timeline again = kvscope::Timeline::load(out_file.path());
    check(again.num_steps() == t.num_steps() && again.num_events() == t.num_events(),
          "save/load round trip");
  } catch (const kvscope::Error&) {
    return 0;
  }
  return 0;
}
