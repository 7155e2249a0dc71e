// Memory arithmetic pinned to figures anyone can check by hand (docs: ../shared/docs/facts.md).
#include <gtest/gtest.h>

#include "engine/analysis/memory_math.h"
#include "engine/common/error.h"
#include "engine/common/interconnect.h"
#include "engine/model/synthetic.h"

namespace kvscope {
namespace {

ModelConfig llama3_70b() {
  return parse_synthetic_spec("llama-3-70b").config;
}

TEST(MemoryMath, Llama3_70BFp16Is327680BytesPerTokenAnd40GiBAt128K) {
  const ModelConfig c = llama3_70b();
  ASSERT_EQ(c.n_layers, 80);
  ASSERT_EQ(c.n_kv_heads, 8);
  ASSERT_EQ(c.head_dim(), 128);
  const double per_token = kv_bytes_per_token(c, payload_bytes_per_element(KvDtype::kF16));
  EXPECT_EQ(per_token, 327680.0);
  EXPECT_EQ(per_token, 320.0 * 1024);  // 320 KiB
  EXPECT_EQ(kv_bytes_at(per_token, 131072), 40.0 * kBytesPerGiB);
  EXPECT_EQ(kv_bytes_at(per_token, 1048576), 320.0 * kBytesPerGiB);
  EXPECT_EQ(kv_bytes_at(per_token, 32 * 4096), 40.0 * kBytesPerGiB);  // batch 32 at 4,096
  // The pool's exact accounting agrees with the formula where a format has no scales.
  KvFormat fp16;
  fp16.dtype = KvDtype::kF16;
  EXPECT_EQ(kv_bytes_per_token_exact(c, 16, fp16, fp16), 327680.0);
  // MHA with 64 KV heads would be 8x: 2.5 MiB per token.
  ModelConfig mha = c;
  mha.n_kv_heads = 64;
  EXPECT_EQ(kv_bytes_per_token(mha, 2.0), 2.5 * 1024 * 1024);
}

TEST(MemoryMath, ScalesMakeQuantizedFormatsExactlyLargerThanTheirPayload) {
  const ModelConfig c = llama3_70b();
  KvFormat int8;
  int8.dtype = KvDtype::kInt8;
  const double payload = kv_bytes_per_token(c, payload_bytes_per_element(KvDtype::kInt8));
  EXPECT_EQ(payload, 163840.0);
  // int8 keeps one fp16 scale per token per head: 2 x 80 x 8 x 2 bytes more.
  EXPECT_EQ(kv_bytes_per_token_exact(c, 16, int8, int8), payload + 2.0 * 80 * 8 * 2);
}

TEST(MemoryMath, DeepSeekV3MlaLatentIs70272BytesPerToken) {
  const ModelConfig ds = parse_synthetic_spec("deepseek-v3-mla-dims").config;
  EXPECT_EQ(mla_bytes_per_token(ds, 2.0), 70272.0);
  EXPECT_EQ(mla_bytes_per_token(llama3_70b(), 2.0), 0.0);
}

TEST(MemoryMath, FiveHundredTokensInSixteenTokenBlocks) {
  const BlockFit f = paged_block_fit(500, 16);
  EXPECT_EQ(f.blocks, 32);
  EXPECT_EQ(f.slots, 512);
  EXPECT_EQ(f.wasted_slots, 12);
  EXPECT_DOUBLE_EQ(f.utilization, 500.0 / 512.0);
  const BlockFit g = paged_block_fit(1000, 16);
  EXPECT_EQ(g.blocks, 63);
  EXPECT_EQ(g.wasted_slots, 8);
  EXPECT_EQ(paged_block_fit(512, 16).wasted_slots, 0);
  EXPECT_EQ(paged_block_fit(0, 16).blocks, 0);
  EXPECT_EQ(paged_block_fit(1, 256).wasted_slots, 255);
  EXPECT_THROW(paged_block_fit(-1, 16), Error);
  EXPECT_THROW(paged_block_fit(10, 0), Error);
}

TEST(MemoryMath, MemoryWallOnOneToEightGpus) {
  const ModelConfig c = llama3_70b();
  const double weights = weight_bytes(c, 2.0);
  EXPECT_EQ(weights, static_cast<double>(c.num_params()) * 2.0);
  const double per_token = kv_bytes_per_token(c, 2.0);
  const auto rows = memory_wall(weights, per_token, 80e9, 1, 8, 4096);
  ASSERT_EQ(rows.size(), 8u);
  EXPECT_FALSE(rows[0].weights_fit);  // ~139 GB of fp16 weights do not fit one 80 GB GPU
  EXPECT_EQ(rows[0].max_tokens, 0);
  EXPECT_EQ(rows[0].max_batch, 0);
  for (const MemoryWallRow& r : rows) {
    EXPECT_EQ(r.total_bytes, 80e9 * r.gpus);
    if (!r.weights_fit) continue;
    // Exactly the largest token count whose bytes fit the budget.
    EXPECT_LE(static_cast<double>(r.max_tokens) * per_token, r.kv_budget_bytes);
    EXPECT_GT(static_cast<double>(r.max_tokens + 1) * per_token, r.kv_budget_bytes);
    EXPECT_EQ(r.max_batch, r.max_tokens / 4096);
  }
  // Hand check for 8 GPUs: (640e9 - weights) / 327,680.
  const auto expect8 = static_cast<std::int64_t>((640e9 - weights) / 327680.0);
  EXPECT_EQ(rows[7].max_tokens, expect8);
  EXPECT_THROW(memory_wall(weights, per_token, 80e9, 0, 8, 4096), Error);
  EXPECT_THROW(memory_wall(weights, per_token, 80e9, 3, 2, 4096), Error);
  EXPECT_THROW(memory_wall(weights, 0.0, 80e9, 1, 8, 4096), Error);
  EXPECT_THROW(memory_wall(weights, per_token, 80e9, 1, 8, 0), Error);
}

// Ring attention on Llama-3-70B's shape (80 layers, 8 KV heads of 128, fp16: 327,680 B a token),
// figures by hand: 131,072 tokens = 40 GiB; over 8 devices 16,384 tokens = 5 GiB each; one
// layer's chunk 16,384 x 4,096 B = 64 MiB; 7 steps x 80 layers x 64 MiB = 35 GiB sent each.
TEST(MemoryMath, RingSplitsOneSequenceEvenly) {
  const RingSplit r = ring_split(327680.0, 80, 131072, 8);
  EXPECT_EQ(r.chunk_tokens, 16384);
  EXPECT_EQ(r.total_bytes, 40.0 * kBytesPerGiB);
  EXPECT_EQ(r.device_bytes, 5.0 * kBytesPerGiB);
  EXPECT_EQ(r.device_bytes, r.total_bytes / 8);
  EXPECT_EQ(r.step_bytes, 64.0 * 1024 * 1024);
  EXPECT_EQ(r.steps_per_layer, 7);
  EXPECT_EQ(r.sent_per_device, 35.0 * kBytesPerGiB);
  EXPECT_EQ(r.sent_per_device, r.total_bytes * 7 / 8);  // every chunk but its own passes through
  EXPECT_EQ(r.buffer_bytes, 128.0 * 1024 * 1024);
  for (int p : {1, 2, 4, 16, 64}) {  // per device = total / P whenever P divides the context
    const RingSplit q = ring_split(327680.0, 80, 131072, p);
    EXPECT_EQ(q.device_bytes * p, q.total_bytes) << p;
    EXPECT_EQ(q.sent_per_device, q.total_bytes * (p - 1) / p) << p;
  }
  const RingSplit one = ring_split(327680.0, 80, 131072, 1);
  EXPECT_EQ(one.steps_per_layer, 0);
  EXPECT_EQ(one.sent_per_device, 0.0);
  EXPECT_EQ(one.buffer_bytes, 0.0);
}

TEST(MemoryMath, RingCountsTheLargestChunkAndRefusesEmptyDevices) {
  const RingSplit r = ring_split(1000.0, 10, 1000, 3);  // chunks of 334, 333 and 333 tokens
  EXPECT_EQ(r.chunk_tokens, 334);
  EXPECT_EQ(r.device_bytes, 334000.0);
  EXPECT_EQ(r.step_bytes, 33400.0);
  EXPECT_EQ(ring_split(1000.0, 10, 3, 3).chunk_tokens, 1);
  for (int bad : {0, -1, 4, 5000}) {
    try {
      ring_split(1000.0, 10, 3, bad);
      ADD_FAILURE() << "accepted " << bad << " devices for 3 tokens";
    } catch (const Error& e) {
      EXPECT_EQ(e.where(), "ring devices");
      EXPECT_NE(std::string(e.what()).find(std::to_string(bad)), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(ring_split(0.0, 10, 1000, 2), Error);
  EXPECT_THROW(ring_split(1000.0, 0, 1000, 2), Error);
  EXPECT_THROW(ring_split(1000.0, 10, 0, 1), Error);
}

// Ring attention's timing against the paper's Table 2 (Liu et al., 2023): multi-head attention in
// bf16 passes 4 x heads x head_dim bytes a token at a layer, so the smallest chunk whose attention
// hides its transfer is F / B: 1,040 tokens for an A100 over NVLink (312 TFLOPS, 300 GB/s; the
// table prints 1.0K), 24,960 over 100 Gb/s InfiniBand (12.5 GB/s; printed 24.5K), 1,026 for a
// TPU v4 (275 TFLOPS, 268 GB/s; printed 1.0K).
TEST(MemoryMath, RingTimingMatchesTheRingAttentionPapersBlockSizes) {
  const int heads = 32, head_dim = 128, layers = 32;
  const double mha_bf16 = 4.0 * heads * head_dim * layers;  // K and V, 2 bytes each
  const auto min_chunk = [&](double flops, double bandwidth) {
    return ring_timing(ring_split(mha_bf16, layers, 8192, 4), heads, head_dim, flops, bandwidth)
        .min_chunk_tokens;
  };
  EXPECT_NEAR(min_chunk(312e12, 300e9), 1040.0, 1e-9);
  EXPECT_NEAR(min_chunk(312e12, 12.5e9), 24960.0, 1e-9);
  EXPECT_NEAR(min_chunk(275e12, 268e9), 275e12 / 268e9, 1e-9);
  // Grouped-query attention passes heads / kv_heads times fewer bytes: Llama-3-70B's 64 query
  // heads over 8 KV heads need an eighth of the chunk (989 TFLOPS over 450 GB/s: 274.7 tokens).
  const RingSplit llama = ring_split(327680.0, 80, 131072, 8);
  const RingTiming g = ring_timing(llama, 64, 128, 989e12, 450e9);
  EXPECT_NEAR(g.min_chunk_tokens, 989e12 / 450e9 / 8, 1e-9);
  EXPECT_DOUBLE_EQ(g.step_flops, 4.0 * 16384.0 * 16384.0 * 64 * 128);
  EXPECT_DOUBLE_EQ(g.transfer_seconds, 64.0 * 1024 * 1024 / 450e9);
  EXPECT_TRUE(g.hidden());
  EXPECT_DOUBLE_EQ(g.layer_seconds, 8 * g.compute_seconds);
  EXPECT_DOUBLE_EQ(g.layer_seconds_serial, 8 * g.compute_seconds + 7 * g.transfer_seconds);
}

// At the threshold the step's attention and transfer take the same time; below it each of the
// devices - 1 transfers shows what it takes beyond its step's attention; one device sends nothing.
TEST(MemoryMath, RingTimingExposesWhatTheComputeCannotHide) {
  const int heads = 32, head_dim = 128, layers = 32;
  const double mha_bf16 = 4.0 * heads * head_dim * layers;
  const RingTiming at =
      ring_timing(ring_split(mha_bf16, layers, 4 * 1040, 4), heads, head_dim, 312e12, 300e9);
  EXPECT_NEAR(at.transfer_seconds / at.compute_seconds, 1.0, 1e-12);
  const RingTiming below =
      ring_timing(ring_split(mha_bf16, layers, 4 * 520, 4), heads, head_dim, 312e12, 300e9);
  EXPECT_NEAR(below.transfer_seconds / below.compute_seconds, 2.0, 1e-12);
  EXPECT_FALSE(below.hidden());
  EXPECT_DOUBLE_EQ(below.exposed_seconds, 3 * (below.transfer_seconds - below.compute_seconds));
  EXPECT_DOUBLE_EQ(below.layer_seconds, 4 * below.compute_seconds + below.exposed_seconds);
  const RingTiming one =
      ring_timing(ring_split(mha_bf16, layers, 4096, 1), heads, head_dim, 312e12, 300e9);
  EXPECT_EQ(one.transfer_seconds, 0.0);
  EXPECT_TRUE(one.hidden());
  EXPECT_THROW(ring_timing(ring_split(mha_bf16, layers, 4096, 2), heads, head_dim, 0.0, 1e9),
               Error);
  EXPECT_THROW(ring_timing(ring_split(mha_bf16, layers, 4096, 2), 0, head_dim, 1e12, 1e9), Error);
}

// Links: the presets by name, or a bandwidth with its unit (bytes or bits); anything else is one
// error naming the flag and the accepted forms.
TEST(Interconnect, PresetsAndBandwidths) {
  EXPECT_EQ(parse_link("nvlink4", "--link").bytes_per_second, 450e9);
  EXPECT_EQ(parse_link("ib100", "--link").bytes_per_second, 12.5e9);
  EXPECT_EQ(parse_link("400Gb/s", "--link").bytes_per_second, 50e9);
  EXPECT_EQ(parse_link("12.5 GB/s", "--link").bytes_per_second, 12.5e9);
  EXPECT_EQ(parse_link("rdma400", "--link").bytes_per_second,
            parse_link("400Gb/s", "--link").bytes_per_second);
  for (const char* bad : {"", "fast", "100", "-5GB/s", "0GB/s", "5GB/x", "1e300TB/s"}) {
    try {
      parse_link(bad, "--link");
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()),
                std::string("--link: expected a link (nvlink3, nvlink4, pcie5, rdma400, ib100) or "
                            "a bandwidth such as 100GB/s or 400Gb/s, got ") +
                    bad);
    }
  }
}

TEST(MemoryMath, FormatsBothGiBAndGB) {
  EXPECT_EQ(format_bytes(40.0 * kBytesPerGiB), "40.00 GiB = 42.95 GB");
  EXPECT_EQ(format_bytes(327680), "320.00 KiB = 327.68 KB");
  EXPECT_EQ(format_bytes(512), "512 B");
  EXPECT_EQ(format_bytes(80e9), "74.51 GiB = 80.00 GB");
  EXPECT_EQ(format_count(327680), "327,680");
  EXPECT_EQ(format_count(-1234567), "-1,234,567");
  EXPECT_EQ(format_count(12), "12");
}

TEST(MemoryMath, ParsesSizesOnlyWithAUnit) {
  EXPECT_EQ(parse_byte_size("80GB", "--gpu-mem"), 80e9);
  EXPECT_EQ(parse_byte_size("80 GiB", "--gpu-mem"), 80.0 * kBytesPerGiB);
  EXPECT_EQ(parse_byte_size("141GB", "--gpu-mem"), 141e9);
  EXPECT_EQ(parse_byte_size("1.5TB", "--gpu-mem"), 1.5e12);
  for (const char* bad : {"80", "GB", "-80GB", "80gb", "80 XB", "", "1e3GB", "0GB"}) {
    try {
      parse_byte_size(bad, "--gpu-mem");
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const Error& e) {
      EXPECT_EQ(e.where(), "--gpu-mem");
      EXPECT_NE(std::string(e.what()).find("GiB"), std::string::npos);
    }
  }
}

}  // namespace
}  // namespace kvscope
