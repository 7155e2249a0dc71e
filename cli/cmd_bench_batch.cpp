// kvscope bench batch: decode tokens/s with 1, 4, 16, ... sequences running at once, each step one
// Transformer::forward_step over one token of every sequence (the weights read once per step),
// the batch sizes interleaved within each repeat so machine load hits them alike; medians, and
// each size's speed-up over the first. Greedy decoding from distinct start tokens, paged cache.
// On a CUDA backend each size runs twice, interleaved: the whole step on the device
// (Backend::run_step) and the same backend driven op by op (OpByOp, activations back on the host
// after every op), with what each copies between host and device per step.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include "cli/args.h"
#include "cli/backend_flag.h"
#include "cli/bench_verbs.h"
#include "cli/format.h"
#include "cli/progress.h"
#include "engine/backend/cpu/quant_matmul.h"
#include "engine/backend/op_by_op.h"
#include "engine/common/error.h"
#include "engine/common/openmp.h"
#include "engine/infer/transformer.h"
#include "engine/kv/cache_manager.h"
#include "engine/model/locate.h"
#include "kernels/backend/backend_select.h"
#include "kernels/backend/cuda_backend.h"

namespace kvscope::cli {
namespace {

using Clock = std::chrono::steady_clock;

// The seconds of `steps` decode steps of `seqs` sequences, after one untimed step that starts them,
// and what they copied between host and device (a CUDA backend's count; zero on the CPU).
struct Decode {
  double secs = 0.0;
  device::Traffic traffic;
};

device::Traffic traffic_of(const Backend& device) {
  return cuda_traffic(device).value_or(device::Traffic{});
}

Decode time_decode(Transformer& t, const Backend& device, int seqs, int steps, int block_size) {
  const ModelConfig& c = t.config();
  const int per_seq = (steps + 1 + block_size - 1) / block_size;
  KvLayout layout{c.n_layers, c.n_kv_heads, c.head_dim(), block_size, seqs * per_seq, {}, {}};
  KvCacheManager cache(layout, AllocatorKind::kPaged, c.seq_len, true);
  std::vector<int> next(static_cast<std::size_t>(seqs));
  for (int s = 0; s < seqs; ++s) {
    cache.require_add_sequence(SeqId(s));
    next[static_cast<std::size_t>(s)] = 1 + (s * 7919) % (c.vocab_size - 1);
  }
  std::vector<StepToken> step(static_cast<std::size_t>(seqs));
  auto run_step = [&](int pos) {
    for (int s = 0; s < seqs; ++s) {
      cache.require_append_slots(SeqId(s), 1);
      step[static_cast<std::size_t>(s)] = {next[static_cast<std::size_t>(s)], pos,
                                           cache.view(SeqId(s)), true, nullptr};
    }
    const std::span<const int> greedy = t.greedy_step(step);  // on the device, on a GPU
    std::copy(greedy.begin(), greedy.end(), next.begin());
  };
  run_step(0);
  const device::Traffic before = traffic_of(device);
  const auto start = Clock::now();
  for (int pos = 1; pos <= steps; ++pos) run_step(pos);
  Decode d;
  d.secs = std::chrono::duration<double>(Clock::now() - start).count();
  const device::Traffic after = traffic_of(device);
  d.traffic = {after.to_device_bytes - before.to_device_bytes,
               after.to_device_copies - before.to_device_copies,
               after.to_host_bytes - before.to_host_bytes,
               after.to_host_copies - before.to_host_copies};
  return d;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t h = v.size() / 2;
  return v.size() % 2 ? v[h] : (v[h - 1] + v[h]) / 2;
}

// One JSON row per batch size from the medians of `secs[path][size]` and the copies of
// `traffic[path][size]`: tokens/s, ms per step, the speed-up over the first size, and on a device
// the copies per step and the op-by-op path's figures.
nlohmann::json batch_rows(const std::vector<std::vector<std::vector<double>>>& secs,
                          const std::vector<std::vector<device::Traffic>>& traffic,
                          const std::vector<int>& seqs, int steps, bool device) {
  const std::size_t num_paths = secs.size();
  nlohmann::json out = nlohmann::json::array();
  const auto per_step = [&](std::uint64_t v) { return static_cast<double>(v) / steps; };
  double base = 0.0;
  for (std::size_t i = 0; i < seqs.size(); ++i) {
    nlohmann::json row;
    for (std::size_t p = 0; p < num_paths; ++p) {
      const double m = median(secs[p][i]);
      const double tps = static_cast<double>(seqs[i]) * steps / m;
      if (p == 0 && i == 0) base = tps;
      nlohmann::json j = {{"tokens_per_s", tps}, {"step_ms", 1000.0 * m / steps}};
      if (device) {
        const device::Traffic& t = traffic[p][i];
        j["copies_to_device_per_step"] = per_step(t.to_device_copies);
        j["bytes_to_device_per_step"] = per_step(t.to_device_bytes);
        j["copies_to_host_per_step"] = per_step(t.to_host_copies);
        j["bytes_to_host_per_step"] = per_step(t.to_host_bytes);
      }
      if (p == 0) {
        row = j;
        row["seqs"] = seqs[i];
        row["speedup_vs_first"] = tps / base;
      } else {
        row["op_by_op"] = j;
      }
    }
    out.push_back(row);
  }
  return out;
}

// The table on stdout: per size on the CPU; per size and path, with the copies, on a device.
void print_batch_tables(const nlohmann::json& out, const std::string& backend_name, bool device,
                        int first_seqs) {
  if (!device) {
    std::printf("| sequences | tokens/s | ms per step | vs %d seq |\n|---:|---:|---:|---:|\n",
                first_seqs);
    for (const auto& row : out) {
      std::printf("| %d | %.1f | %.2f | %.2fx |\n", row["seqs"].get<int>(),
                  row["tokens_per_s"].get<double>(), row["step_ms"].get<double>(),
                  row["speedup_vs_first"].get<double>());
    }
    return;
  }
  if (backend_name == "cuda-sim") {
    std::printf(
        "emulated device: times are the SIMT emulator's on this CPU, not a GPU's; the "
        "copies are what a GPU would make\n");
  }
  std::printf(
      "| sequences | path | tokens/s | ms per step | copies up / down per step | "
      "bytes up / down per step |\n|---:|---|---:|---:|---:|---:|\n");
  for (const auto& row : out) {
    for (const nlohmann::json* j : {&row, row.contains("op_by_op") ? &row["op_by_op"] : nullptr}) {
      if (j == nullptr) continue;
      std::printf("| %d | %s | %.2f | %.1f | %.0f / %.0f | %s / %s |\n", row["seqs"].get<int>(),
                  j == &row ? "whole step" : "op by op", (*j)["tokens_per_s"].get<double>(),
                  (*j)["step_ms"].get<double>(), (*j)["copies_to_device_per_step"].get<double>(),
                  (*j)["copies_to_host_per_step"].get<double>(),
                  human_bytes((*j)["bytes_to_device_per_step"].get<double>()).c_str(),
                  human_bytes((*j)["bytes_to_host_per_step"].get<double>()).c_str());
    }
  }
}

}  // namespace

int bench_batch(const Args& args) {
  LoadedModel loaded =
      load_model(args.get("--model", "synthetic:smollm2-135m"), "", WeightStorage::kMapped,
                 parse_weight_format(args.get("--weight-format", "native"), "--weight-format"));
  const ModelConfig& c = loaded.model->config();
  const std::vector<int> seqs = parse_int_list(args.get("--seqs", "1,4,16"), "--seqs", 1, 256,
                                               "comma-separated sequence counts in [1, 256]");
  const int steps = args.get_int("--steps", 32);
  if (steps < 1 || steps + 1 > c.seq_len) {
    fail_expected("--steps", "an integer in [1, " + std::to_string(c.seq_len - 1) + "]",
                  std::to_string(steps));
  }
  const int repeat = args.get_int("--repeat", 3);
  if (repeat < 1) fail_expected("--repeat", "a positive integer", std::to_string(repeat));
  const int threads = args.get_int("--threads", 0);
  if (threads < 0) fail_expected("--threads", "a non-negative integer", std::to_string(threads));
  const int block_size = args.get_int("--block-size", 16);
  if (block_size < 1 || block_size > 256 || (block_size & (block_size - 1)) != 0)
    fail_expected("--block-size", "a power of two in [1, 256]", std::to_string(block_size));
  RunNeeds needs;
  needs.model = loaded.model.get();
  auto backend = make_backend(args.get("--backend", "auto"), threads,
                              args.get("--device-weights", "f16"), needs);
  const bool device = cuda_traffic(*backend).has_value();
  // The paths each size runs: the backend's own step; on a CUDA backend also its ops one by one.
  struct Path {
    const char* name;
    std::unique_ptr<Transformer> t;
  };
  OpByOp op_by_op(*backend);
  std::vector<Path> paths;
  paths.push_back(
      {device ? "whole step" : "step", std::make_unique<Transformer>(loaded.model, *backend)});
  if (device) paths.push_back({"op by op", std::make_unique<Transformer>(loaded.model, op_by_op)});
  const bool json = args.has("--json");
  const char* label = loaded.model->is_random_weights() ? "[random weights] " : "";
  if (!json) {
    std::fprintf(stderr,
                 "%s%s on %s: %d decode steps per run, %d runs per batch size%s, "
                 "interleaved\n",
                 label, loaded.model->source().c_str(), backend->name().c_str(), steps, repeat,
                 device ? " and path" : "");
  }
  // secs[path][size]: one entry per repeat; traffic[path][size]: the last run's (the same in
  // every run: the steps and their shapes are).
  std::vector<std::vector<std::vector<double>>> secs(paths.size(),
                                                     std::vector<std::vector<double>>(seqs.size()));
  std::vector<std::vector<device::Traffic>> traffic(paths.size(),
                                                    std::vector<device::Traffic>(seqs.size()));
  // Warm-up: weights paged in (uploaded, on a device), buffers sized for the largest batch.
  for (Path& p : paths)
    time_decode(*p.t, *backend, *std::max_element(seqs.begin(), seqs.end()), 1, block_size);
  {
    Progress progress("bench batch",
                      repeat * static_cast<int>(seqs.size()) * static_cast<int>(paths.size()));
    for (int r = 0; r < repeat; ++r) {
      for (std::size_t i = 0; i < seqs.size(); ++i) {
        for (std::size_t p = 0; p < paths.size(); ++p) {
          progress.step("run " + std::to_string(r + 1) + "/" + std::to_string(repeat) + ", " +
                        std::to_string(seqs[i]) + " seqs" + (device ? ", " : "") +
                        (device ? paths[p].name : ""));
          const Decode d = time_decode(*paths[p].t, *backend, seqs[i], steps, block_size);
          secs[p][i].push_back(d.secs);
          traffic[p][i] = d.traffic;
        }
      }
    }
  }
  const nlohmann::json out = batch_rows(secs, traffic, seqs, steps, device);
  if (json) {
    std::printf("%s\n", out.dump(2).c_str());
    return 0;
  }
  std::printf("%s%s on %s, %d threads, block %d; weights %s\n", label,
              loaded.model->source().c_str(), backend->name().c_str(),
              threads > 0 ? threads : omp_get_num_procs(), block_size,
              device ? "on the device" : cpu::describe_weight_format(*loaded.model).c_str());
  print_batch_tables(out, backend->name(), device, seqs.front());
  return 0;
}

const Subverb& bench_batch_verb() {
  static const Subverb verb{
      "batch",
      "decode tokens/s with N sequences per step, each step one batched forward",
      {"--model", "--seqs", "--steps", "--repeat", "--threads", "--block-size", "--weight-format",
       "--backend", "--device-weights"},
      {"--json"},
      with_backend_help(R"(usage: kvscope bench batch [options]

Decode tokens/s with N sequences per step, each step one batched forward (the weights read once
per step), the sizes interleaved within each repeat; each size's speed-up over the first. On a
CUDA backend each size runs the whole step on the device and the same ops one by one, with the
copies between host and device per step (cuda-sim: the emulator's times).

  --model PATH|NAME          model (default synthetic:smollm2-135m, random weights)
  --seqs LIST                sequences per step (default 1,4,16)
  --steps N                  decode steps (default 32)
  --repeat R                 repeats (default 3)
  --threads T                CPU threads (default: all cores)
  --block-size B             KV block size in tokens (default 16)
  --weight-format native|f32 GGUF models' weights (default native)
%BACKEND%
  --json                     print the figures as JSON
)"),
      bench_batch};
  return verb;
}

}  // namespace kvscope::cli
