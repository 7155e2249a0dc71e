// kvscope bench tiers: when is reloading a cached prefix from a lower tier cheaper than
// recomputing it? For each prefix length, on the real model: the prefill of those tokens in one
// step into a fresh cache, against reloading their blocks (the same bytes, just computed) from a
// host tier in RAM and from a disk tier's file (synced and dropped from the page cache on write,
// so reads come from the device), through KvTierStore as the Simulator does. Medians of the
// repeats, all measured in this run; the break-even is the shortest length where the reload wins.
#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/args.h"
#include "cli/bench_verbs.h"
#include "cli/model_flags.h"
#include "cli/progress.h"
#include "engine/analysis/kv_memory_probe.h"
#include "engine/analysis/memory_math.h"
#include "engine/common/error.h"
#include "engine/infer/step_runner.h"
#include "engine/infer/transformer.h"
#include "engine/model/locate.h"
#include "engine/tiers/kv_tier_store.h"

namespace kvscope::cli {
namespace {

using Clock = std::chrono::steady_clock;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

struct Reload {
  double write_s = 0;  // demoting every block into the tier
  double read_s = 0;   // loading every block back into pool blocks
};

// Demotes the prefix's blocks into a fresh one-tier store, then loads each back into another pool
// block and checks the bytes came back unchanged.
Reload time_tier(const KvTierOptions& tier, KvStorage& pool, int blocks) {
  const std::size_t bytes = pool.layout().block_bytes();
  KvTierStore store({tier}, bytes, true);
  std::vector<std::byte> buf(bytes), back(bytes);
  Reload r;
  auto start = Clock::now();
  for (int b = 0; b < blocks; ++b) {
    pool.read_block(BlockId(b), buf.data());
    store.demote(static_cast<std::uint64_t>(b) + 1, buf.data());
  }
  r.write_s = since(start);
  start = Clock::now();
  for (int b = 0; b < blocks; ++b) {
    if (!store.load(static_cast<std::uint64_t>(b) + 1, buf.data())) {
      throw InternalError("bench tiers", tier.name + " lost block " + std::to_string(b));
    }
    pool.write_block(BlockId(blocks + b), buf.data());
  }
  r.read_s = since(start);
  for (int b = 0; b < blocks; ++b) {
    pool.read_block(BlockId(b), buf.data());
    pool.read_block(BlockId(blocks + b), back.data());
    if (buf != back) {
      throw InternalError("bench tiers", tier.name + " changed the bytes of block " +
                                             std::to_string(b) + " on the way");
    }
  }
  return r;
}

// The prefix lengths measured: --tokens, else doubling from the block size to 1,024 (or the
// model's seq_len); each a multiple of the block size.
std::vector<int> prefix_lengths(const Args& args, const ModelConfig& c, int bs) {
  std::vector<int> lengths;
  if (args.has("--tokens")) {
    lengths = parse_int_list(args.get("--tokens"), "--tokens", 1, c.seq_len,
                             "prefix lengths in tokens, multiples of the block size");
  } else {
    for (int n = bs; n <= std::min(c.seq_len, 1024); n *= 2) lengths.push_back(n);
    if (lengths.empty()) {
      fail_expected("--block-size",
                    "at most " + std::to_string(std::min(c.seq_len, 1024)) +
                        " without --tokens (the longest default prefix)",
                    std::to_string(bs));
    }
  }
  for (int n : lengths) {
    if (n % bs != 0) {
      fail_expected("--tokens", "multiples of the block size " + std::to_string(bs),
                    std::to_string(n));
    }
  }
  return lengths;
}

// Medians over `repeat` runs of one prefix length: its prefill, its host reload, its disk reload
// and its disk write (seconds).
std::array<double, 4> time_length(Transformer& t, const std::vector<int>& tokens,
                                  const KvLayout& layout, int n, int repeat, const std::string& dir,
                                  Progress& progress) {
  const int blocks = n / layout.block_size;
  std::vector<double> prefill, host_r, disk_r, disk_w;
  for (int r = 0; r < repeat; ++r) {
    progress.update(r, repeat);
    KvLayout l = layout;
    SoloSequence seq(l, n);
    const auto start = Clock::now();
    seq.run(
        t, std::span<const int>(tokens).first(static_cast<std::size_t>(n)),
        [](int, std::span<const float>) {}, n);
    prefill.push_back(since(start));
    // A pool with room for the prefix and its reloaded copy, holding the prefill's bytes.
    l.num_blocks = 2 * blocks;
    KvStorage pool(l);
    std::vector<std::byte> buf(l.block_bytes());
    const std::vector<BlockId>& table = seq.cache().table(SoloSequence::kSeq).blocks;
    for (int b = 0; b < blocks; ++b) {
      seq.cache().storage()->read_block(table[static_cast<std::size_t>(b)], buf.data());
      pool.write_block(BlockId(b), buf.data());
    }
    host_r.push_back(time_tier({"host", TierMedium::kHost, blocks, ""}, pool, blocks).read_s);
    const Reload d = time_tier({"disk", TierMedium::kDisk, blocks, dir}, pool, blocks);
    disk_r.push_back(d.read_s);
    disk_w.push_back(d.write_s);
    progress.update(r + 1, repeat);
  }
  return {median(prefill), median(host_r), median(disk_r), median(disk_w)};
}

// "host reload is cheaper than prefill from 64 tokens on", or dearer at every length.
std::string verdict(const char* tier, int even) {
  return even > 0 ? std::string(tier) + " reload is cheaper than prefill from " +
                        std::to_string(even) + " tokens on"
                  : std::string(tier) + " reload is dearer than prefill at every length measured";
}

}  // namespace

int bench_tiers(const Args& args) {
  const int threads = args.get_int("--threads", 1);
  if (threads < 1) fail_expected("--threads", "a positive integer", std::to_string(threads));
  const int repeat = std::max(1, args.get_int("--repeat", 5));
  const int bs = args.get_int("--block-size", 16);
  if (bs < 1 || bs > 4096) {
    fail_expected("--block-size", "an integer in [1, 4096]", std::to_string(bs));
  }
  const KvFormat format = parse_kv_format(args.get("--kv-dtype", "fp16"), "--kv-dtype");
  LoadedModel loaded = load_model_flags(args);
  const ModelConfig& c = loaded.model->config();
  const std::vector<int> lengths = prefix_lengths(args, c, bs);
  std::string dir = args.get("--dir", "");
  auto backend = make_cpu_backend(threads);
  Transformer t(loaded.model, *backend);
  const int longest = *std::max_element(lengths.begin(), lengths.end());
  int repeats = 0;
  const std::vector<int> tokens =
      probe_tokens(loaded.tokenizer.get(), "Once upon a time there was a little dog.", longest,
                   c.vocab_size, "bench tiers", &repeats);
  const KvLayout layout = kv_layout_for(c, bs, 1, format, format);
  const bool json = args.has("--json");
  if (!json) {
    std::fprintf(stderr,
                 "bench tiers: %s%s, %s KV, block %d (%s), %d thread%s, %d repeats: prefill vs "
                 "reload from host RAM and from a disk file (synced, read from the device)\n",
                 loaded.model->is_random_weights() ? "[random weights] " : "",
                 loaded.model->source().c_str(), format.name().c_str(), bs,
                 format_bytes(static_cast<double>(layout.block_bytes())).c_str(), threads,
                 threads == 1 ? "" : "s", repeat);
    std::printf("%8s %7s %22s %11s %12s %12s %12s %10s %10s\n", "tokens", "blocks", "KV bytes",
                "prefill", "host reload", "disk reload", "disk write", "vs host", "vs disk");
  }
  nlohmann::json rows = nlohmann::json::array();
  int host_even = 0, disk_even = 0;
  // Each length's share of the time: its prefill, about linear in the tokens at these lengths.
  Progress progress("bench tiers", static_cast<int>(lengths.size()), "repeats",
                    std::vector<double>(lengths.begin(), lengths.end()));
  for (int n : lengths) {
    const int blocks = n / bs;
    progress.step(std::to_string(n) + " tokens");
    const auto [p, h, d, w] = time_length(t, tokens, layout, n, repeat, dir, progress);
    if (host_even == 0 && h < p) host_even = n;
    if (disk_even == 0 && d < p) disk_even = n;
    const double kv = static_cast<double>(layout.block_bytes()) * blocks;
    rows.push_back({{"tokens", n},
                    {"blocks", blocks},
                    {"kv_bytes", kv},
                    {"prefill_s", p},
                    {"host_reload_s", h},
                    {"disk_reload_s", d},
                    {"disk_write_s", w},
                    {"prefill_over_host_reload", p / h},
                    {"prefill_over_disk_reload", p / d}});
    if (!json) {
      progress.clear();
      std::printf("%8d %7d %22s %11s %12s %12s %12s %9.1fx %9.1fx\n", n, blocks,
                  format_bytes(kv).c_str(), format_ms(p).c_str(), format_ms(h).c_str(),
                  format_ms(d).c_str(), format_ms(w).c_str(), p / h, p / d);
      std::fflush(stdout);
    }
  }
  if (json) {
    const nlohmann::json j = {{"model", loaded.model->source()},
                              {"random_weights", loaded.model->is_random_weights()},
                              {"kv_format", format.name()},
                              {"block_size", bs},
                              {"block_bytes", layout.block_bytes()},
                              {"threads", threads},
                              {"repeat", repeat},
                              {"host_break_even_tokens", host_even},
                              {"disk_break_even_tokens", disk_even},
                              {"rows", rows}};
    std::printf("%s\n", j.dump().c_str());
    return 0;
  }
  std::printf("break-even: %s; %s\n", verdict("host", host_even).c_str(),
              verdict("disk", disk_even).c_str());
  return 0;
}

const Subverb& bench_tiers_verb() {
  static const Subverb verb{
      "tiers",
      "reload a cached prefix from host/disk tiers vs recompute it, per length",
      {"--model", "--tokenizer", "--tokens", "--kv-dtype", "--block-size", "--threads", "--repeat",
       "--dir"},
      {"--json"},
      R"(usage: kvscope bench tiers [options]

When is reloading a cached prefix cheaper than recomputing it: per prefix length, its prefill in
one step on the real model against reloading its blocks from a host tier (RAM) and a disk tier
(a file in --dir, synced and dropped from the page cache, so reads come from the device), and
the break-even length.

  --model PATH|NAME          model (default stories260K.bin)
  --tokenizer PATH           tokenizer (default: found beside the model)
  --tokens LIST              prefix lengths (default doubling from the block size to 1,024)
  --kv-dtype F               cache format (default fp16)
  --block-size B             KV block size in tokens (default 16)
  --threads T                CPU threads (default 1)
  --repeat R                 repeats (default 5)
  --dir D                    the disk tier's directory (default the temp directory)
  --json                     print the figures as JSON
)",
      bench_tiers};
  return verb;
}

}  // namespace kvscope::cli
