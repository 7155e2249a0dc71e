// The memory wall table and plot for Llama-3-70B: the figures a reader can check by hand.
#include <gtest/gtest.h>

#include "engine/common/error.h"
#include "engine/model/synthetic.h"
#include "engine/report/memory_wall_report.h"
#include "tests/test_support.h"

namespace kvscope {
namespace {

MemoryWallSpec llama3_70b_spec() {
  MemoryWallSpec spec;
  spec.model_name = "synthetic:llama-3-70b";
  spec.shape = parse_synthetic_spec("llama-3-70b").config;
  spec.params = spec.shape.num_params();
  spec.kv_format = parse_kv_format("fp16", "test");
  spec.context = 131072;
  return spec;
}

TEST(MemoryWallReport, Llama3_70BOnOneToEightH100s) {
  const MemoryWallSpec spec = llama3_70b_spec();
  const MemoryWall wall = compute_memory_wall(spec);
  EXPECT_EQ(wall.kv_bytes_per_token, 327680.0);
  EXPECT_EQ(wall.kv_payload_bytes_per_token, 327680.0);
  EXPECT_EQ(wall.weight_bytes, 2.0 * static_cast<double>(spec.shape.num_params()));
  ASSERT_EQ(wall.rows.size(), 8u);
  EXPECT_FALSE(wall.rows[0].weights_fit);
  // 8 x 80 GB minus the weights, in 40 GiB (131,072-token) sequences.
  const double budget = 640e9 - wall.weight_bytes;
  EXPECT_EQ(wall.rows[7].max_batch, static_cast<std::int64_t>(budget / (40.0 * kBytesPerGiB)));
  const std::string text = memory_wall_text(spec, wall);
  EXPECT_NE(text.find("= 327,680 B (320.00 KiB = 327.68 KB)"), std::string::npos) << text;
  EXPECT_NE(text.find("none: weights do not fit"), std::string::npos);
  EXPECT_NE(text.find("GiB = 2^30 bytes, GB = 10^9 bytes"), std::string::npos);
  const std::string md = memory_wall_markdown(spec, wall);
  EXPECT_NE(md.find("| 8 | 596.05 GiB = 640.00 GB |"), std::string::npos) << md;
  const std::string png = test::temp_path("memwall.png");
  write_memory_wall_png(spec, png, "test");
  const std::vector<char> bytes = test::read_bytes(png);
  ASSERT_GT(bytes.size(), 8u);
  EXPECT_EQ(std::string(bytes.begin() + 1, bytes.begin() + 4), "PNG");
}

TEST(MemoryWallReport, QuantizedFormatsCountTheirScales) {
  MemoryWallSpec spec = llama3_70b_spec();
  spec.kv_format = parse_kv_format("int4", "test");  // groups of 32 values, fp16 scale + zero
  const MemoryWall wall = compute_memory_wall(spec);
  EXPECT_EQ(wall.kv_payload_bytes_per_token, 81920.0);
  EXPECT_EQ(wall.kv_bytes_per_token, 81920.0 + 2.0 * 80 * (1024 / 32) * 4);
  spec.params = 0;
  EXPECT_THROW(compute_memory_wall(spec), Error);
}

// --ring 8 at 131,072 tokens: the split's lines, and the check against the table's 8-GPU row
// (640 GB less the weights, over 8 GPUs: 62.36 GB each, room for the 5 GiB chunk).
TEST(MemoryWallReport, RingSectionSplitsTheSequenceAndChecksTheRow) {
  MemoryWallSpec spec = llama3_70b_spec();
  spec.ring_devices = 8;
  const MemoryWall wall = compute_memory_wall(spec);
  ASSERT_TRUE(wall.ring.has_value());
  EXPECT_EQ(wall.ring->device_bytes, 5.0 * kBytesPerGiB);
  const std::string text = memory_wall_text(spec, wall);
  EXPECT_NE(text.find("131,072 tokens x 327,680 B = 40.00 GiB = 42.95 GB"), std::string::npos)
      << text;
  EXPECT_NE(text.find("16,384 tokens = 5.00 GiB = 5.37 GB (the cache / 8)"), std::string::npos);
  EXPECT_NE(text.find("16,384 tokens x 4,096 B (one layer) = 64.00 MiB = 67.11 MB; 7 steps"),
            std::string::npos);
  EXPECT_NE(text.find("7 steps x 80 layers x 64.00 MiB = 35.00 GiB = 37.58 GB"), std::string::npos);
  EXPECT_NE(text.find("8-GPU row each GPU has 58.08 GiB = 62.36 GB"), std::string::npos);
  EXPECT_NE(text.find(") fit\n"), std::string::npos);
  // The timing: an H100's attention on a chunk (8.8e12 FLOPs at 989 TFLOPS: 8.89 ms) hides the
  // chunk's 64 MiB over NVLink 4 (149.1 us); a step hides it from 275 tokens.
  EXPECT_NE(text.find("over nvlink4 at 450 GB/s one way"), std::string::npos) << text;
  EXPECT_NE(text.find("4 x 16,384^2 x 64 heads x 128 = 8.8e+12 FLOPs: 8.89 ms"), std::string::npos);
  EXPECT_NE(text.find("64.00 MiB / 450 GB/s = 149.1 us: hidden behind the attention"),
            std::string::npos);
  EXPECT_NE(text.find("chunks of 275 tokens or more hide the transfer"), std::string::npos);
  // On 2 GPUs the weights leave 18.89 GB, 9.44 GB each: a 20 GiB half of the cache does not fit.
  spec.ring_devices = 2;
  spec.max_gpus = 2;
  const std::string two = memory_wall_text(spec, compute_memory_wall(spec));
  EXPECT_NE(two.find("65,536 tokens = 20.00 GiB"), std::string::npos) << two;
  EXPECT_NE(two.find(") do not fit\n"), std::string::npos) << two;
  spec.ring_devices = 0;
  EXPECT_EQ(memory_wall_text(spec, compute_memory_wall(spec)).find("ring"), std::string::npos);
}

}  // namespace
}  // namespace kvscope
