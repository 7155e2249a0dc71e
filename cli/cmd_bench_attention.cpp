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

// The device --backend names: a real GPU (cuda) or the emulated one (cuda-sim).
std::unique_ptr<device::DeviceOps> device_ops_for(const std::string& backend) {
  if (backend == "cuda-sim") return device::make_emulated_device_ops();
  if (backend != "cuda") fail_expected("--backend", "cuda or cuda-sim", "'" + backend + "'");
  std::string why;
  std::unique_ptr<device::DeviceOps> ops = device::make_cuda_device_ops(&why);
  if (ops == nullptr) {
    throw Error("--backend", "cuda: CUDA unavailable: " + why +
                                 " (bench attention measures a GPU; --backend cuda-sim runs "
                                 "it on the emulated device, without meaningful times)");
  }
  return ops;
}

// The flags as the runs read them, checked before anything runs.
struct AttentionRun {
  std::unique_ptr<device::DeviceOps> ops;
  bool emulated = false;
  std::vector<int> batches, contexts;
  std::vector<std::string> formats;
  int block_size = 16, repeat = 1;
  std::string sdpa;
  bool json = false;
};

AttentionRun parse_attention_run(const Args& args) {
  AttentionRun run;
  const std::string backend = args.get("--backend", "cuda");
  run.ops = device_ops_for(backend);
  run.emulated = backend == "cuda-sim";
  run.batches = parse_int_list(args.get("--batch", run.emulated ? "1,2" : "1,8,64"), "--batch", 1,
                               256, "comma-separated batch sizes in [1, 256]");
  run.contexts =
      parse_int_list(args.get("--contexts", run.emulated ? "256,1024" : "1024,8192,32768"),
                     "--contexts", 1, 131072, "comma-separated context lengths in [1, 131072]");
  run.block_size = args.get_int("--block-size", 16);
  const int bs = run.block_size;
  if (bs < 1 || bs > 256 || (bs & (bs - 1)) != 0)
    fail_expected("--block-size", "a power of two in [1, 256]", std::to_string(bs));
  run.repeat = args.get_int("--repeat", run.emulated ? 1 : 20);
  if (run.repeat < 1) fail_expected("--repeat", "a positive integer", std::to_string(run.repeat));
  run.formats = split_list(args.get("--formats", "fp16,int8,fp8-e4m3"));
  for (const std::string& name : run.formats) {  // every format checked before anything runs
    const KvFormat f = parse_kv_format(name, "--formats");
    f.validate(bs, kKvHeads, kHeadDim, "--formats");
    code_of(f, name);
  }
  run.sdpa = args.get("--sdpa", "auto");
  if (run.sdpa != "auto" && run.sdpa != "off")
    fail_expected("--sdpa", "auto or off", "'" + run.sdpa + "'");
  run.json = args.has("--json");
  return run;
}

// One (format, context, batch) on the device: its K/V tiles filled, the queries uploaded.
struct AttentionCase {
  device::DeviceTiles k, v;
  int context = 0, batch = 0, per_seq = 0;
  long blocks = 0;
  bool batched = false;  // one batch launch (else one split-K launch per sequence)
  const float* q = nullptr;
  float* out = nullptr;
  std::size_t q_size = 0;  // floats per sequence
};

// Milliseconds of one pass over every sequence of `c`, the blocks consecutive per sequence or
// (paged) every block of the pool shuffled; the mean of the run's repeats after an untimed pass.
double time_layout(const AttentionRun& run, const AttentionCase& c, bool paged) {
  device::DeviceOps& ops = *run.ops;
  std::vector<int> all(static_cast<std::size_t>(c.blocks));
  std::iota(all.begin(), all.end(), 0);
  if (paged) std::shuffle(all.begin(), all.end(), std::mt19937(9));
  Buffer table(ops, all.size() * sizeof(int));
  ops.to_device(table.p, all.data(), all.size() * sizeof(int));
  std::vector<int> meta;
  for (int s = 0; s < c.batch; ++s) {  // device_ops.h's layout: no live map, capture or KIVI
    meta.insert(meta.end(), {s * c.per_seq, c.context, -1, -1, c.context, -1, c.context, -1});
  }
  Buffer dmeta(ops, meta.size() * sizeof(int));
  ops.to_device(dmeta.p, meta.data(), meta.size() * sizeof(int));
  auto pass = [&] {
    if (c.batched) {
      device::PagedBatchPool p;
      p.k = c.k;
      p.v = c.v;
      p.block_size = run.block_size;
      p.kv_heads = kKvHeads;
      p.head_dim = kHeadDim;
      p.tables = static_cast<const int*>(table.p);
      p.meta = static_cast<const int*>(dmeta.p);
      ops.paged_attention_batch(c.out, c.q, p, c.batch, kHeads, c.context, nullptr);
      return;
    }
    for (int s = 0; s < c.batch; ++s) {
      device::PagedPool p;
      p.k = c.k;
      p.v = c.v;
      p.block_table = static_cast<const int*>(table.p) + static_cast<long>(s) * c.per_seq;
      p.num_slots = c.context;
      p.block_size = run.block_size;
      p.kv_heads = kKvHeads;
      p.head_dim = kHeadDim;
      ops.paged_attention(c.out + s * c.q_size, c.q + s * c.q_size, p, kHeads, nullptr);
    }
  };
  // One untimed pass first: lazy kernel loading and split-K's workspace are paid there.
  pass();
  return ops.time_ms([&] {
    for (int r = 0; r < run.repeat; ++r) pass();
  }) / run.repeat;
}

// The copy baseline: `bytes` copied device to device from `src`, same run (GB/s, read + write).
double copy_gb_per_s(const AttentionRun& run, const void* src, std::size_t bytes) {
  Buffer dst(*run.ops, bytes);
  run.ops->copy_on_device(dst.p, src, bytes);  // warm-up, untimed
  const double ms = run.ops->time_ms([&] {
    for (int r = 0; r < run.repeat; ++r) run.ops->copy_on_device(dst.p, src, bytes);
  }) / run.repeat;
  return 2.0 * static_cast<double>(bytes) / (ms * 1e6);
}

// One format at one context and batch, both layouts: a JSON row or a table line each; fp16's
// contiguous figures kept for SDPA.
void bench_case(const AttentionRun& run, const std::string& name, int context, int batch,
                nlohmann::json& rows, std::map<std::pair<int, int>, Fp16Figures>& fp16) {
  device::DeviceOps& ops = *run.ops;
  const KvFormat f = parse_kv_format(name, "--formats");
  const device::KvCode code = code_of(f, name);
  const std::size_t tile = f.tile_bytes(run.block_size, kKvHeads, kHeadDim);
  AttentionCase c;
  c.context = context;
  c.batch = batch;
  c.per_seq = (context + run.block_size - 1) / run.block_size;
  c.blocks = static_cast<long>(c.per_seq) * batch;
  Buffer k(ops, tile * static_cast<std::size_t>(c.blocks));
  Buffer v(ops, tile * static_cast<std::size_t>(c.blocks));
  const int group = f.effective_group(kKvHeads * kHeadDim);
  c.k = {static_cast<unsigned char*>(k.p), static_cast<long>(tile), code, group};
  c.v = {static_cast<unsigned char*>(v.p), static_cast<long>(tile), code, group};
  ops.fill_kv(c.k, c.blocks, run.block_size, kKvHeads, kHeadDim, 1);
  ops.fill_kv(c.v, c.blocks, run.block_size, kKvHeads, kHeadDim, 2);
  std::vector<float> q(static_cast<std::size_t>(kHeads) * kHeadDim);
  std::mt19937 rng(5);
  std::normal_distribution<float> nd;
  for (float& x : q) x = nd(rng);
  // The batch's queries: the same q for every sequence.
  std::vector<float> qs;
  for (int s = 0; s < batch; ++s) qs.insert(qs.end(), q.begin(), q.end());
  Buffer dq(ops, qs.size() * 4), dout(ops, qs.size() * 4);
  ops.to_device(dq.p, qs.data(), qs.size() * 4);
  c.q = static_cast<const float*>(dq.p);
  c.out = static_cast<float*>(dout.p);
  c.q_size = q.size();
  // A batch within the one-pass limit is one launch (the batch kernel, as an engine step runs);
  // longer contexts run one split-K launch per sequence.
  c.batched = batch > 1 && context <= device::DeviceOps::batch_max_slots();
  // K/V bytes one pass over every sequence reads: the slots' codes and scales.
  const double kv_bytes = 2.0 * static_cast<double>(batch) * context *
                          f.bytes_per_token(run.block_size, kKvHeads, kHeadDim);
  // The copy baseline: the same number of bytes, device to device, same run.
  const double copy_gbs = copy_gb_per_s(
      run, k.p,
      std::min(static_cast<std::size_t>(kv_bytes / 2), tile * static_cast<std::size_t>(c.blocks)));
  const char* launch = c.batched ? "batch" : "per sequence";
  for (const char* layout : {"contiguous", "paged"}) {
    const double ms = time_layout(run, c, std::string(layout) == "paged");
    const double gbs = kv_bytes / (ms * 1e6);
    if (name == "fp16" && std::string(layout) == "contiguous")
      fp16[{context, batch}] = Fp16Figures{ms, copy_gbs};
    if (run.json) {
      rows.push_back({{"format", name},
                      {"context", context},
                      {"batch", batch},
                      {"layout", layout},
                      {"ms", ms},
                      {"kv_gb_per_s", gbs},
                      {"copy_gb_per_s", copy_gbs},
                      {"of_copy", gbs / copy_gbs},
                      {"launch", launch},
                      {"emulated", run.emulated}});
    } else {
      std::printf("%-9s %7d %5d %-10s %10.3f %12.2f %12.2f %7.1f%%  %s\n", name.c_str(), context,
                  batch, layout, ms, gbs, copy_gbs, 100.0 * gbs / copy_gbs, launch);
    }
  }
}

// PyTorch's SDPA on the same GPU, fp16 K/V contiguous: the second baseline.
void sdpa_baseline(const AttentionRun& run, const std::map<std::pair<int, int>, Fp16Figures>& fp16,
                   nlohmann::json& rows) {
  if (run.sdpa != "auto") return;
  if (run.emulated) {
    std::fprintf(stderr, "PyTorch SDPA: not run on the emulated device (it times a GPU)\n");
    return;
  }
  const SdpaResult r = run_sdpa(sdpa_script(), run.batches, run.contexts, run.repeat);
  if (!r.available) std::fprintf(stderr, "PyTorch SDPA: not run: %s\n", r.reason.c_str());
  if (r.available && !run.json) {
    std::printf("PyTorch %s SDPA on %s, fp16 K/V contiguous:\n", r.torch.c_str(), r.device.c_str());
  }
  std::string text;
  append_sdpa_rows(r, fp16, rows, text);
  if (!run.json) std::fputs(text.c_str(), stdout);
}

int bench_attention(const Args& args) {
  const AttentionRun run = parse_attention_run(args);
  if (!run.json) {
    std::fprintf(stderr,
                 "bench attention: %s, %d query heads, %d KV heads of %d, block %d, %d repeats%s\n",
                 run.ops->name(), kHeads, kKvHeads, kHeadDim, run.block_size, run.repeat,
                 run.emulated ? " [emulated device: times say nothing about a GPU]" : "");
    std::printf("%-9s %7s %5s %-10s %10s %12s %12s %8s  %s\n", "format", "context", "batch",
                "layout", "time ms", "K/V GB/s", "copy GB/s", "of copy", "launch");
  }
  nlohmann::json rows = nlohmann::json::array();
  // fp16's contiguous time and copy bandwidth per (context, batch): what SDPA is compared with.
  std::map<std::pair<int, int>, Fp16Figures> fp16;
  for (const std::string& name : run.formats) {
    for (int context : run.contexts) {
      for (int batch : run.batches) bench_case(run, name, context, batch, rows, fp16);
    }
  }
  sdpa_baseline(run, fp16, rows);
  if (run.json) std::printf("%s\n", rows.dump().c_str());
  return 0;
}

}  // namespace

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
