// kvscope info: a model's shape, parameter count and KV bytes per token per format.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/format.h"
#include "cli/info_measure.h"
#include "engine/backend/cpu/quant_matmul.h"
#include "engine/common/error.h"
#include "engine/infer/transformer.h"
#include "engine/kv/kv_storage.h"
#include "engine/model/locate.h"
#include "engine/model/synthetic.h"

namespace kvscope::cli {

namespace {

constexpr const char* kInfoHelp =
    R"(usage: kvscope info [--model PATH|NAME|synthetic:SPEC] [--weight-format native|f32]
prints the model's shape, how its weights are held and read, and its KV bytes per token per
format; synthetic models are described without allocating their weights.

measured memory vs context (runs the model: about 10 s for SmolLM2 at 2K, a minute at 8K):
  --measure LIST     context lengths, e.g. 2048,4096,8192: for each, one sequence of that many
                     tokens runs through the model into a paged pool sized for it; prints the
                     formula's bytes, the allocator's (blocks x block bytes) and the pool's pages
                     the OS backs (mincore), and the same shape as MHA; with --out DIR,
                     also writes DIR/memory_measured.csv and DIR/memory_vs_context.png
  --kv-dtype F       K and V format (default fp16)
  --block-size B     tokens per block (default 16)
  --text FILE        the text run (default assets/text/eval_stories.txt, repeated as needed;
                     models without a tokenizer run fixed pseudo-random token ids)
  --threads N        CPU threads (default: all cores)
  --out DIR          write the CSV and the PNG into DIR (created if missing); without
                     --out nothing is written
  --json             print the points as JSON
progress (context i/n, tokens done, elapsed, ETA) goes to stderr: redrawn in place on a
terminal, otherwise a line every 5 s ($KVSCOPE_PROGRESS_INTERVAL: seconds, or off)
)";

// What the file stores, what the engine holds and reads per token, and the tokenizer.
void print_loaded_weights(const LoadedModel& loaded, double seconds) {
  const Model& m = *loaded.model;
  std::printf(
      "weights:    %s in the file; the engine holds %s as %s (loaded in %.2f s)\n",
      m.weight_types().c_str(), human_bytes(static_cast<double>(m.weight_bytes())).c_str(),
      m.format() == CheckpointFormat::kGguf ? "fp32 (dequantized at load)" : "fp32 (mmapped)",
      seconds);
  if (m.native() != nullptr) {
    const std::string held = human_bytes(static_cast<double>(m.native_bytes()));
    if (m.native_blocks_in_file()) {
      std::printf(
          "            and %s of quantized matrices repacked for the CPU kernels, which the "
          "forward\n"
          "            pass reads (their blocks are read in place from the file)\n",
          held.c_str());
    } else {
      std::printf(
          "            and %s of quantized matrices as stored; the forward pass reads those\n",
          held.c_str());
    }
    if (m.lazy_f32_bytes() > 0) {
      std::printf("            (their fp32 copy, %s, is made on first use: the MLA conversion)\n",
                  human_bytes(static_cast<double>(m.lazy_f32_bytes())).c_str());
    }
  }
  std::printf("matmuls:    %s; %s of weights read per token\n",
              cpu::describe_weight_format(m).c_str(),
              human_bytes(static_cast<double>(weight_bytes_per_token(m))).c_str());
  if (loaded.tokenizer) {
    std::printf("tokenizer:  %d tokens, BOS %d, from %s\n", loaded.tokenizer->vocab_size(),
                loaded.tokenizer->bos_id(), loaded.tokenizer->path().c_str());
  }
}

// RoPE, the shape, the parameter count and the attention kind.
void print_shape(const ModelConfig& c) {
  std::printf("rope:       theta %g, RMSNorm eps %g\n", static_cast<double>(c.rope_theta),
              static_cast<double>(c.rms_eps));
  std::printf("shape:      %s\n", c.describe().c_str());
  std::printf("parameters: %s (%s as fp32)\n", with_commas(c.num_params()).c_str(),
              human_bytes(static_cast<double>(c.num_params()) * 4).c_str());
  std::printf("attention:  %s, %d query heads, %d KV heads (group %d)\n", attention_kind(c),
              c.n_heads, c.n_kv_heads, c.gqa_group());
}

// KV bytes per token per payload width, at seq_len and at 128K tokens.
void print_kv_bytes_table(const ModelConfig& c) {
  std::printf(
      "\nKV bytes per token = 2 (K,V) x %d layers x %d KV heads x %d head_dim x bytes/elem\n",
      c.n_layers, c.n_kv_heads, c.head_dim());
  struct Row {
    const char* name;
    double bytes;
  };
  const Row rows[] = {
      {"fp32", 4}, {"fp16/bf16", 2}, {"fp8/int8", 1}, {"int4", 0.5}, {"int2", 0.25}};
  std::printf("  %-10s %14s %26s %26s\n", "format", "bytes/token", "at seq_len", "at 128K tokens");
  for (const Row& r : rows) {
    const std::int64_t per_token = c.kv_bytes_per_token(r.bytes);
    std::printf("  %-10s %14s %26s %26s\n", r.name, with_commas(per_token).c_str(),
                human_bytes(static_cast<double>(per_token) * c.seq_len).c_str(),
                human_bytes(static_cast<double>(per_token) * 131072).c_str());
  }
  std::printf("  (payload only; quantized formats add scales: see kvscope eval for exact bytes)\n");
}

// The model's own MLA latent cache against MHA, or what kvscope's MLA conversion would store.
void print_mla_sizes(const ModelConfig& c, bool random) {
  // Latent cache sizes through the pool's own byte accounting (KvLayout), fp16 like the MHA row.
  const KvFormat fp16 = parse_kv_format("fp16", "info");
  const double mha16 = kv_layout_for(c, 16, 1, fp16, fp16).bytes_per_token();
  auto latent_bytes = [&](int latent, int rope_heads, int rope_dim) {
    KvLayout L = kv_layout_for(c, 16, 1, fp16, fp16);
    L.latent_dim = latent;
    L.rope_heads = rope_heads;
    L.rope_dim = rope_dim;
    return L.bytes_per_token();
  };
  const char* label = random ? " [random weights; sizes only]" : "";
  if (c.mla_kv_lora_rank > 0) {
    const double mla = latent_bytes(c.mla_kv_lora_rank, 1, c.mla_rope_dim);
    std::printf(
        "\nMLA latent cache (fp16)%s:\n  %d layers x (%d latent + %d RoPE key) x 2 bytes = %s "
        "bytes/token; %s at seq_len, %s at 128K tokens\n",
        label, c.n_layers, c.mla_kv_lora_rank, c.mla_rope_dim,
        with_commas(static_cast<std::int64_t>(mla)).c_str(), human_bytes(mla * c.seq_len).c_str(),
        human_bytes(mla * 131072).c_str());
    std::printf(
        "  vs MHA with %d KV heads x %d (fp16, %s bytes/token): %.1fx smaller, %.1f%% fewer "
        "bytes;\n  the same bytes as GQA with %.2f KV heads of %d\n",
        c.n_kv_heads, c.head_dim(), with_commas(static_cast<std::int64_t>(mha16)).c_str(),
        mha16 / mla, 100.0 * (1.0 - mla / mha16),
        static_cast<double>(c.mla_kv_lora_rank + c.mla_rope_dim) / (2.0 * c.head_dim()),
        c.head_dim());
  } else {
    // What kvscope's MLA conversion (kvscope eval/generate --mla-rank) stores for this model.
    const int full = std::min(2 * c.kv_dim(), c.dim);
    std::printf(
        "\nMLA conversion (--mla-rank R, mode a)%s: %d layers x R latent values x bytes;\n"
        "  full rank (exact) = min(2 x kv_dim, dim) = %d\n",
        label, c.n_layers, full);
    std::printf("  %-10s %14s %14s %12s\n", "rank", "fp32 bytes", "fp16 bytes", "vs fp16 K/V");
    for (int r : {full, full / 2, full / 4, full / 8}) {
      if (r < 1) continue;
      const double b16 = latent_bytes(r, 0, 0);
      std::printf("  %-10d %14s %14s %11.3fx\n", r,
                  with_commas(static_cast<std::int64_t>(2 * b16)).c_str(),
                  with_commas(static_cast<std::int64_t>(b16)).c_str(), b16 / mha16);
    }
    if (c.n_kv_heads != c.n_heads) {
      std::printf("  (for reference, MHA with %d KV heads would be %s fp16 bytes/token)\n",
                  c.n_heads,
                  with_commas(static_cast<std::int64_t>(mha16 * c.n_heads / c.n_kv_heads)).c_str());
    }
  }
}

}  // namespace

int cmd_info(const Argv& argv) {
  Args args(argv,
            {"--model", "--weight-format", "--measure", "--kv-dtype", "--block-size", "--text",
             "--threads", "--out"},
            {"--help", "--json"});
  if (args.has("--help")) {
    std::fputs(kInfoHelp, stdout);
    return 0;
  }
  if (!args.positional().empty())
    throw Error(args.positional()[0], "unexpected argument; see --help");
  const std::string arg = args.get("--model");
  if (args.has("--measure")) {
    return run_info_measure(
        args,
        load_model(arg, "", WeightStorage::kMapped,
                   parse_weight_format(args.get("--weight-format", "native"), "--weight-format")));
  }
  for (const char* flag :
       {"--kv-dtype", "--block-size", "--text", "--threads", "--out", "--json"}) {
    if (args.has(flag)) throw Error(flag, "expected --measure with it (see --help)");
  }
  const bool random = is_synthetic_model_arg(arg);
  std::string source;
  // Synthetic shapes are described without allocating their weights; real weights are loaded
  // (once) to say what the file stores and what the engine holds.
  LoadedModel loaded;
  double seconds = 0.0;
  if (!random) {
    const auto started = std::chrono::steady_clock::now();
    loaded =
        load_model(arg, "", WeightStorage::kMapped,
                   parse_weight_format(args.get("--weight-format", "native"), "--weight-format"));
    seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    source = loaded.model->source();
  }
  const ModelConfig c = random ? model_config_for(arg, &source) : loaded.model->config();
  std::printf("model:      %s\n", source.c_str());
  if (random) {
    std::printf("weights:    random weights (no quality figure is meaningful)\n");
  } else {
    print_loaded_weights(loaded, seconds);
  }
  print_shape(c);
  print_kv_bytes_table(c);
  print_mla_sizes(c, random);
  std::printf("\n(GiB = 2^30 bytes, GB = 10^9 bytes)\n");
  return 0;
}

}  // namespace kvscope::cli
