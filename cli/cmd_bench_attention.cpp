// kvscope bench attention: decode attention on a CUDA device at Llama-3-8B's attention shape (32
// query heads, 8 KV heads of 128), for batches of sequences and context lengths, per K/V format,
// the pool paged (blocks scattered) or contiguous (each sequence's blocks consecutive). It
// reports the K/V bytes the kernels read per second beside a device-to-device copy of the same
// bytes timed in the same run, and the ratios the issue's targets are stated in. Needs a GPU
// (--backend cuda); --backend cuda-sim runs it on the emulated device, where the times say
// nothing about a GPU (the run checks that every path executes).
#include <algorithm>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "cli/args.h"
#include "cli/bench_verbs.h"
#include "cli/sdpa_baseline.h"
#include "engine/common/error.h"
#include "engine/kv/kv_format.h"
#include "kernels/backend/cuda_backend.h"
#include "kernels/backend/device_ops.h"

namespace kvscope::cli {
namespace {

constexpr int kHeads = 32, kKvHeads = 8, kHeadDim = 128;  // Llama-3-8B's attention

// KIVI is left out: its sequences' open groups are full-precision rows outside the tiles, which
// the synthetic fill does not make.
device::KvCode code_of(const KvFormat& f, const std::string& name) {
  if (f.is_kivi()) {
    fail_expected("--formats", "fp32, fp16, bf16, int8, fp8-e4m3, fp8-e5m2, int4 or int2",
                  "'" + name + "'");
  }
  return cuda_kv_code(f, KvKind::kKey);
}

// A device allocation freed with its owner.
struct Buffer {
  device::DeviceOps& ops;
  void* p;
  Buffer(device::DeviceOps& o, std::size_t bytes) : ops(o), p(o.alloc(bytes)) {}
  ~Buffer() { ops.release(p); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
};

}  // namespace

int bench_attention(const Args& args) {
  const std::string backend = args.get("--backend", "cuda");
  std::unique_ptr<device::DeviceOps> ops;
  if (backend == "cuda") {
    std::string why;
    ops = device::make_cuda_device_ops(&why);
    if (ops == nullptr) {
      throw Error("--backend", "cuda: CUDA unavailable: " + why +
                                   " (bench attention measures a GPU; --backend cuda-sim runs "
                                   "it on the emulated device, without meaningful times)");
    }
  } else if (backend == "cuda-sim") {
    ops = device::make_emulated_device_ops();
  } else {
    fail_expected("--backend", "cuda or cuda-sim", "'" + backend + "'");
  }
  const bool emulated = backend == "cuda-sim";
  const std::vector<int> batches =
      parse_int_list(args.get("--batch", emulated ? "1,2" : "1,8,64"), "--batch", 1, 256,
                     "comma-separated batch sizes in [1, 256]");
  const std::vector<int> contexts =
      parse_int_list(args.get("--contexts", emulated ? "256,1024" : "1024,8192,32768"),
                     "--contexts", 1, 131072, "comma-separated context lengths in [1, 131072]");
  const int block_size = args.get_int("--block-size", 16);
  if (block_size < 1 || block_size > 256 || (block_size & (block_size - 1)) != 0)
    fail_expected("--block-size", "a power of two in [1, 256]", std::to_string(block_size));
  const int repeat = args.get_int("--repeat", emulated ? 1 : 20);
  if (repeat < 1) fail_expected("--repeat", "a positive integer", std::to_string(repeat));
  std::vector<std::string> formats;
  {
    const std::string text = args.get("--formats", "fp16,int8,fp8-e4m3");
    for (std::size_t at = 0; at <= text.size();) {
      const std::size_t comma = std::min(text.find(',', at), text.size());
      formats.push_back(text.substr(at, comma - at));
      at = comma + 1;
    }
  }
  for (const std::string& name : formats) {  // every format checked before anything runs
    const KvFormat f = parse_kv_format(name, "--formats");
    f.validate(block_size, kKvHeads, kHeadDim, "--formats");
    code_of(f, name);
  }
  const std::string sdpa = args.get("--sdpa", "auto");
  if (sdpa != "auto" && sdpa != "off") fail_expected("--sdpa", "auto or off", "'" + sdpa + "'");
  const bool json = args.has("--json");
  if (!json) {
    std::fprintf(stderr,
                 "bench attention: %s, %d query heads, %d KV heads of %d, block %d, %d repeats%s\n",
                 ops->name(), kHeads, kKvHeads, kHeadDim, block_size, repeat,
                 emulated ? " [emulated device: times say nothing about a GPU]" : "");
    std::printf("%-9s %7s %5s %-10s %10s %12s %12s %8s  %s\n", "format", "context", "batch",
                "layout", "time ms", "K/V GB/s", "copy GB/s", "of copy", "launch");
  }
  nlohmann::json rows = nlohmann::json::array();
  // fp16's contiguous time and copy bandwidth per (context, batch): what SDPA is compared with.
  std::map<std::pair<int, int>, Fp16Figures> fp16;
  for (const std::string& name : formats) {
    const KvFormat f = parse_kv_format(name, "--formats");
    const device::KvCode code = code_of(f, name);
    const std::size_t tile = f.tile_bytes(block_size, kKvHeads, kHeadDim);
    for (int context : contexts) {
      const int per_seq = (context + block_size - 1) / block_size;
      for (int batch : batches) {
        const long blocks = static_cast<long>(per_seq) * batch;
        Buffer k(*ops, tile * static_cast<std::size_t>(blocks));
        Buffer v(*ops, tile * static_cast<std::size_t>(blocks));
        const int group = f.effective_group(kKvHeads * kHeadDim);
        const device::DeviceTiles kt{static_cast<unsigned char*>(k.p), static_cast<long>(tile),
                                     code, group};
        const device::DeviceTiles vt{static_cast<unsigned char*>(v.p), static_cast<long>(tile),
                                     code, group};
        ops->fill_kv(kt, blocks, block_size, kKvHeads, kHeadDim, 1);
        ops->fill_kv(vt, blocks, block_size, kKvHeads, kHeadDim, 2);
        std::vector<float> q(static_cast<std::size_t>(kHeads) * kHeadDim);
        std::mt19937 rng(5);
        std::normal_distribution<float> nd;
        for (float& x : q) x = nd(rng);
        // The batch's queries: the same q for every sequence.
        std::vector<float> qs;
        for (int s = 0; s < batch; ++s) qs.insert(qs.end(), q.begin(), q.end());
        Buffer dq(*ops, qs.size() * 4), dout(*ops, qs.size() * 4);
        ops->to_device(dq.p, qs.data(), qs.size() * 4);
        // A batch within the one-pass limit is one launch (the batch kernel, as an engine step
        // runs); longer contexts run one split-K launch per sequence.
        const bool batched = batch > 1 && context <= device::DeviceOps::batch_max_slots();
        // K/V bytes one pass over every sequence reads: the slots' codes and scales.
        const double kv_bytes = 2.0 * static_cast<double>(batch) * context *
                                f.bytes_per_token(block_size, kKvHeads, kHeadDim);
        // The copy baseline: the same number of bytes, device to device, same run.
        const auto copy_bytes = std::min(static_cast<std::size_t>(kv_bytes / 2),
                                         tile * static_cast<std::size_t>(blocks));
        Buffer copy_dst(*ops, copy_bytes);
        ops->copy_on_device(copy_dst.p, k.p, copy_bytes);  // warm-up, untimed
        const double copy_ms = ops->time_ms([&] {
          for (int r = 0; r < repeat; ++r) ops->copy_on_device(copy_dst.p, k.p, copy_bytes);
        }) / repeat;
        const double copy_gbs = 2.0 * static_cast<double>(copy_bytes) / (copy_ms * 1e6);
        for (const char* layout : {"contiguous", "paged"}) {
          // Block tables: consecutive blocks per sequence, or every block of the pool shuffled.
          std::vector<int> all(static_cast<std::size_t>(blocks));
          std::iota(all.begin(), all.end(), 0);
          if (std::string(layout) == "paged") std::shuffle(all.begin(), all.end(), std::mt19937(9));
          Buffer table(*ops, all.size() * sizeof(int));
          ops->to_device(table.p, all.data(), all.size() * sizeof(int));
          std::vector<int> meta;
          for (int s = 0; s < batch; ++s) {  // device_ops.h's layout: no live map, capture or KIVI
            meta.insert(meta.end(), {s * per_seq, context, -1, -1, context, -1, context, -1});
          }
          Buffer dmeta(*ops, meta.size() * sizeof(int));
          ops->to_device(dmeta.p, meta.data(), meta.size() * sizeof(int));
          auto pass = [&] {
            if (batched) {
              device::PagedBatchPool p;
              p.k = kt;
              p.v = vt;
              p.block_size = block_size;
              p.kv_heads = kKvHeads;
              p.head_dim = kHeadDim;
              p.tables = static_cast<const int*>(table.p);
              p.meta = static_cast<const int*>(dmeta.p);
              ops->paged_attention_batch(static_cast<float*>(dout.p),
                                         static_cast<const float*>(dq.p), p, batch, kHeads, context,
                                         nullptr);
              return;
            }
            for (int s = 0; s < batch; ++s) {
              device::PagedPool p;
              p.k = kt;
              p.v = vt;
              p.block_table = static_cast<const int*>(table.p) + static_cast<long>(s) * per_seq;
              p.num_slots = context;
              p.block_size = block_size;
              p.kv_heads = kKvHeads;
              p.head_dim = kHeadDim;
              ops->paged_attention(static_cast<float*>(dout.p) + s * q.size(),
                                   static_cast<const float*>(dq.p) + s * q.size(), p, kHeads,
                                   nullptr);
            }
          };
          // One untimed pass first: lazy kernel loading and split-K's workspace are paid there.
          pass();
          const double ms = ops->time_ms([&] {
            for (int r = 0; r < repeat; ++r) pass();
          }) / repeat;
          const double gbs = kv_bytes / (ms * 1e6);
          if (name == "fp16" && std::string(layout) == "contiguous")
            fp16[{context, batch}] = Fp16Figures{ms, copy_gbs};
          if (json) {
            rows.push_back({{"format", name},
                            {"context", context},
                            {"batch", batch},
                            {"layout", layout},
                            {"ms", ms},
                            {"kv_gb_per_s", gbs},
                            {"copy_gb_per_s", copy_gbs},
                            {"of_copy", gbs / copy_gbs},
                            {"launch", batched ? "batch" : "per sequence"},
                            {"emulated", emulated}});
          } else {
            std::printf("%-9s %7d %5d %-10s %10.3f %12.2f %12.2f %7.1f%%  %s\n", name.c_str(),
                        context, batch, layout, ms, gbs, copy_gbs, 100.0 * gbs / copy_gbs,
                        batched ? "batch" : "per sequence");
          }
        }
      }
    }
  }
  // PyTorch's SDPA on the same GPU, fp16 K/V contiguous: the second baseline.
  if (sdpa == "auto" && emulated) {
    std::fprintf(stderr, "PyTorch SDPA: not run on the emulated device (it times a GPU)\n");
  } else if (sdpa == "auto") {
    const SdpaResult r = run_sdpa(sdpa_script(), batches, contexts, repeat);
    if (!r.available) std::fprintf(stderr, "PyTorch SDPA: not run: %s\n", r.reason.c_str());
    if (r.available && !json) {
      std::printf("PyTorch %s SDPA on %s, fp16 K/V contiguous:\n", r.torch.c_str(),
                  r.device.c_str());
    }
    std::string text;
    append_sdpa_rows(r, fp16, rows, text);
    if (!json) std::fputs(text.c_str(), stdout);
  }
  if (json) std::printf("%s\n", rows.dump().c_str());
  return 0;
}

const Subverb& bench_attention_verb() {
  static const Subverb verb{
      "attention",
      "CUDA decode attention at Llama-3-8B's shape vs a device copy (needs a GPU)",
      {"--backend", "--batch", "--contexts", "--formats", "--block-size", "--repeat", "--sdpa"},
      {"--json"},
      R"(usage: kvscope bench attention [options]

CUDA decode attention at Llama-3-8B's shape (32 query heads, 8 KV heads of 128): K/V bytes read
per second beside a device-to-device copy in the same run, paged vs contiguous, per format.

  --backend cuda|cuda-sim    cuda (default: needs a GPU) or cuda-sim (the emulated device, times
                             meaningless; checks that every path executes)
  --batch LIST               sequences (default 1,8,64; cuda-sim 1,2)
  --contexts LIST            context lengths (default 1024,8192,32768; cuda-sim 256,1024)
  --formats LIST             K/V formats (default fp16,int8,fp8-e4m3)
  --block-size B             KV block size in tokens (default 16)
  --repeat R                 repeats (default 20; cuda-sim 1)
  --sdpa auto|off            auto: PyTorch's SDPA at fp16 beside them when torch sees the GPU
                             (scripts/sdpa_bench.py)
  --json                     print the figures as JSON
)",
      bench_attention};
  return verb;
}

}  // namespace kvscope::cli
