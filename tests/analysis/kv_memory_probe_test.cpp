// Measured KV memory on the real model (stories260K): the allocator's bytes against the formula
// and the pool's layout, the OS's resident pages against the allocator, and bad contexts.
#include "engine/analysis/kv_memory_probe.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include "engine/analysis/memory_math.h"
#include "engine/backend/backend.h"
#include "engine/common/error.h"
#include "engine/kv/kv_storage.h"
#include "tests/test_support.h"

namespace kvscope {
namespace {

std::vector<int> story_tokens(int n) {
  const LoadedModel& m = test::real_model();
  std::vector<int> tokens = m.tokenizer->encode(
      "Once upon a time, there was a little girl named Lily. She loved to play "
      "outside in the sunshine with her friends and her dog.",
      true, false);
  while (static_cast<int>(tokens.size()) < n)
    tokens.insert(tokens.end(), tokens.begin(), tokens.end());
  tokens.resize(static_cast<std::size_t>(n));
  return tokens;
}

TEST(KvMemoryProbe, AllocatorBytesFollowTheFormulaAndTheOsBacksThem) {
  const LoadedModel& m = test::real_model();
  const ModelConfig& c = m.model->config();
  auto backend = make_cpu_backend(1);
  Transformer t(m.model, *backend);
  const std::vector<int> tokens = story_tokens(100);
  const long page = ::sysconf(_SC_PAGESIZE);
  for (const char* format : {"fp16", "int8"}) {
    KvMemoryProbeOptions o;
    o.block_size = 16;
    o.k_format = o.v_format = parse_kv_format(format, "test");
    const int contexts[] = {16, 40, 100};
    const auto points = measure_kv_memory(t, tokens, contexts, o);
    ASSERT_EQ(points.size(), 3u);
    const KvLayout layout = kv_layout_for(c, 16, 1, o.k_format, o.v_format);
    for (const KvMemoryPoint& p : points) {
      SCOPED_TRACE(std::string(format) + " at " + std::to_string(p.tokens) + " tokens");
      EXPECT_EQ(p.blocks, (p.tokens + 15) / 16);
      EXPECT_DOUBLE_EQ(
          p.formula_bytes,
          kv_bytes_per_token(c, payload_bytes_per_element(o.k_format.dtype)) * p.tokens);
      EXPECT_DOUBLE_EQ(p.exact_bytes, layout.bytes_per_token() * p.tokens);
      EXPECT_DOUBLE_EQ(p.allocated_bytes, static_cast<double>(p.blocks) * layout.block_bytes());
      // The pool was sized for this context: every block of it went to the sequence.
      EXPECT_DOUBLE_EQ(p.pool_bytes, p.allocated_bytes);
      // Whole blocks: equal to the exact bytes when the context fills its last block.
      if (p.tokens % 16 == 0)
        EXPECT_DOUBLE_EQ(p.allocated_bytes, p.exact_bytes);
      else
        EXPECT_GT(p.allocated_bytes, p.exact_bytes);
      // fp16 has no scales (the formula is exact); int8 adds one per token and head.
      if (std::string(format) == "fp16")
        EXPECT_DOUBLE_EQ(p.exact_bytes, p.formula_bytes);
      else
        EXPECT_GT(p.exact_bytes, p.formula_bytes);
      // The model wrote every tile, so the OS backs them all: whole pages, K and V regions.
      ASSERT_GE(p.resident_bytes, 0);
      EXPECT_GE(static_cast<double>(p.resident_bytes),
                p.allocated_bytes - static_cast<double>(page));
      EXPECT_LE(static_cast<double>(p.resident_bytes),
                p.allocated_bytes + 3.0 * static_cast<double>(page));
    }
  }
}

TEST(KvMemoryProbe, ContextsOutsideTheTextAreErrors) {
  const LoadedModel& m = test::real_model();
  auto backend = make_cpu_backend(1);
  Transformer t(m.model, *backend);
  const std::vector<int> tokens = story_tokens(20);
  KvMemoryProbeOptions o;
  o.k_format = o.v_format = parse_kv_format("fp16", "test");
  const int too_long[] = {8, 21};
  EXPECT_EQ(test::error_of([&] { measure_kv_memory(t, tokens, too_long, o); }),
            "context 21: expected 1 .. 20 tokens (the text's length)");
  const int zero[] = {0};
  EXPECT_EQ(test::error_of([&] { measure_kv_memory(t, tokens, zero, o); }),
            "context 0: expected 1 .. 20 tokens (the text's length)");
}

// An untouched mapping is not resident; writing a byte makes its page resident (the mmap path;
// under AddressSanitizer the buffer is calloc'd heap, whose pages may already be resident).
TEST(ZeroedBufferResidency, TouchedPagesAreResidentAndUntouchedOnesAreNot) {
  const long page = ::sysconf(_SC_PAGESIZE);
  ZeroedBuffer b(static_cast<std::size_t>(64 * page));
#if !defined(__SANITIZE_ADDRESS__)
  EXPECT_EQ(b.resident_bytes(), 0);
#endif
  b.data()[0] = std::byte{1};
  b.data()[10 * page] = std::byte{1};
  EXPECT_GE(b.resident_bytes(), 2 * page);
  EXPECT_LE(b.resident_bytes(), 64 * page);
}

}  // namespace
}  // namespace kvscope
