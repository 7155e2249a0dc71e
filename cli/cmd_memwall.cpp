// kvscope memwall: the context or batch whose KV cache fits beside the weights on 1..8 GPUs, for a
// model shape and KV format; a table on stdout and, with --out, memwall.png; with --ring, one
// sequence split over a ring of devices (ring attention).
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/format.h"
#include "engine/common/error.h"
#include "engine/model/locate.h"
#include "engine/report/memory_wall_report.h"

namespace kvscope::cli {
namespace {

constexpr const char* kHelp = R"(usage: kvscope memwall [options]

  --model PATH|NAME              model shape (default synthetic:llama-3-70b; weights never loaded)
  --gpus A-B | N                 GPU counts (default 1-8)
  --gpu-mem SIZE                 memory per GPU with its unit: 80GB (10^9 bytes) or 80GiB (2^30)
                                 (default 80GB, an H100)
  --kv-dtype NAME                KV format: fp32, fp16, bf16, fp8-e4m3, int8, int4, kivi2, ...
                                 (default fp16); quantized formats count their scales
  --block-size N                 block size for the scales' exact bytes (default 16)
  --weight-dtype fp32|fp16|bf16|fp8|int8|int4   bytes per weight (default fp16)
  --params N                     parameter count to use instead of the shape's own
  --context N                    tokens per sequence for the batch column (default the model's
                                 trained context)
  --ring P                       ring attention: split one --context-token sequence over P
                                 devices; prints each device's share, the bytes each ring step
                                 passes, whether a share fits on the table's P-GPU row, and
                                 whether each step's attention hides its transfer
  --tflops F                     with --ring: attention FLOPS per device, in TFLOPS (default 989,
                                 an H100 SXM's dense bf16)
  --link NAME|BANDWIDTH          with --ring: the link between neighbours, one way: nvlink3
                                 (300 GB/s), nvlink4 (450, the default), pcie5 (63), rdma400
                                 (50), ib100 (12.5), or a bandwidth such as 100GB/s or 400Gb/s
  --out DIR                      also write DIR/memwall.png
)";

double weight_bytes_per_param(const std::string& dtype) {
  if (dtype == "fp32") return 4;
  if (dtype == "fp16" || dtype == "bf16") return 2;
  if (dtype == "fp8" || dtype == "int8") return 1;
  if (dtype == "int4") return 0.5;
  fail_expected("--weight-dtype", "fp32, fp16, bf16, fp8, int8 or int4", "'" + dtype + "'");
}

void parse_gpus(const std::string& text, int* lo, int* hi) {
  const std::string expected = "a GPU count N or a range A-B with 1 <= A <= B <= 4096";
  auto parse = [&](const std::string& s) {
    std::size_t used = 0;
    int v = 0;
    try {
      v = std::stoi(s, &used);
    } catch (...) {
      used = 0;
    }
    if (used == 0 || used != s.size() || s[0] == '-' || s[0] == '+')
      fail_expected("--gpus", expected, "'" + text + "'");
    return v;
  };
  const std::size_t dash = text.find('-');
  *lo = parse(dash == std::string::npos ? text : text.substr(0, dash));
  *hi = dash == std::string::npos ? *lo : parse(text.substr(dash + 1));
  if (*lo < 1 || *hi < *lo || *hi > 4096) fail_expected("--gpus", expected, "'" + text + "'");
}

}  // namespace

int cmd_memwall(const Argv& argv) {
  Args args(argv,
            {"--model", "--gpus", "--gpu-mem", "--kv-dtype", "--block-size", "--weight-dtype",
             "--params", "--context", "--ring", "--tflops", "--link", "--out"},
            {"--help"});
  if (args.has("--help")) {
    std::fputs(kHelp, stdout);
    return 0;
  }
  if (!args.positional().empty())
    throw Error(args.positional()[0], "unexpected argument; see --help");
  MemoryWallSpec spec;
  const std::string model_arg = args.get("--model", "synthetic:llama-3-70b");
  spec.shape = model_config_for(model_arg, &spec.model_name);
  parse_gpus(args.get("--gpus", "1-8"), &spec.min_gpus, &spec.max_gpus);
  spec.gpu_bytes = parse_byte_size(args.get("--gpu-mem", "80GB"), "--gpu-mem");
  spec.kv_format = parse_kv_format(args.get("--kv-dtype", "fp16"), "--kv-dtype");
  spec.block_size = args.get_int("--block-size", 16);
  if (spec.block_size < 1 || spec.block_size > 4096)
    fail_expected("--block-size", "an integer in [1, 4096]", std::to_string(spec.block_size));
  spec.weight_dtype = args.get("--weight-dtype", "fp16");
  spec.weight_bytes_per_param = weight_bytes_per_param(spec.weight_dtype);
  spec.params = args.get_i64("--params", spec.shape.num_params());
  if (spec.params < 1)
    fail_expected("--params", "a positive parameter count", std::to_string(spec.params));
  spec.context = args.get_i64("--context", spec.shape.seq_len);
  if (spec.context < 1)
    fail_expected("--context", "a positive token count", std::to_string(spec.context));
  if (args.has("--ring")) {
    spec.ring_devices = args.get_int("--ring", 0);
    if (spec.ring_devices < 1 || spec.ring_devices > 4096 || spec.ring_devices > spec.context)
      fail_expected("--ring",
                    "a device count in [1, 4096], at most one device per token of the " +
                        format_count(spec.context) + "-token --context",
                    std::to_string(spec.ring_devices));
    if (args.has("--tflops")) {
      const double tf = args.get_double("--tflops", 0.0);
      if (tf <= 0 || !std::isfinite(tf * 1e12))
        fail_expected("--tflops", "a positive number of TFLOPS per device",
                      "'" + args.get("--tflops") + "'");
      spec.ring_flops = tf * 1e12;
    }
    if (args.has("--link")) spec.ring_link = parse_link(args.get("--link"), "--link");
  } else {
    for (const char* flag : {"--tflops", "--link"}) {
      if (args.has(flag)) throw Error(flag, "only applies with --ring");
    }
  }

  const MemoryWall wall = compute_memory_wall(spec);
  std::printf("memory wall: %s\nshape: %s\n", spec.model_name.c_str(),
              spec.shape.describe().c_str());
  if (spec.shape.mla_kv_lora_rank > 0)
    std::printf(
        "note: an MLA shape; the table is for its full K/V heads, not its %d-value latent cache\n",
        spec.shape.mla_kv_lora_rank + spec.shape.mla_rope_dim);
  std::fputs(memory_wall_text(spec, wall).c_str(), stdout);
  if (args.has("--out")) {
    const std::string dir = args.get("--out");
    checked_out_dir(dir);
    const std::string path = dir + "/memwall.png";
    std::string command = "kvscope memwall";
    for (const std::string& a : argv) command += " " + a;
    write_memory_wall_png(spec, path, command);
    std::printf("wrote %s\n", path.c_str());
  }
  return 0;
}

}  // namespace kvscope::cli
