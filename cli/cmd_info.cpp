// kvscope info: a model's shape, parameter count and KV bytes per token per format.
#include <cstdio>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/format.h"
#include "engine/common/error.h"
#include "engine/model/locate.h"

namespace kvscope::cli {

int cmd_info(const Argv& argv) {
  Args args(argv, {"--model"}, {"--help"});
  if (args.has("--help")) {
    std::fputs("usage: kvscope info [--model PATH|NAME|synthetic:SPEC]\n"
               "prints the model's shape and its KV bytes per token per format; synthetic models\n"
               "are described without allocating their weights.\n", stdout);
    return 0;
  }
  if (!args.positional().empty()) throw Error(args.positional()[0], "unexpected argument; see --help");
  std::string source;
  const ModelConfig c = model_config_for(args.get("--model"), &source);
  const bool random = source.rfind("synthetic:", 0) == 0;
  std::printf("model:      %s\n", source.c_str());
  if (random) std::printf("weights:    random weights (no quality figure is meaningful)\n");
  std::printf("shape:      %s\n", c.describe().c_str());
  std::printf("parameters: %s (%s as fp32)\n", with_commas(c.num_params()).c_str(),
              human_bytes(static_cast<double>(c.num_params()) * 4).c_str());
  std::printf("attention:  %s, %d query heads, %d KV heads (group %d)\n",
              c.n_kv_heads == c.n_heads ? "MHA" : (c.n_kv_heads == 1 ? "MQA" : "GQA"), c.n_heads,
              c.n_kv_heads, c.gqa_group());
  std::printf("\nKV bytes per token = 2 (K,V) x %d layers x %d KV heads x %d head_dim x bytes/elem\n",
              c.n_layers, c.n_kv_heads, c.head_dim());
  struct Row { const char* name; double bytes; };
  const Row rows[] = {{"fp32", 4}, {"fp16/bf16", 2}, {"fp8/int8", 1}, {"int4", 0.5}, {"int2", 0.25}};
  std::printf("  %-10s %14s %26s %26s\n", "format", "bytes/token", "at seq_len", "at 128K tokens");
  for (const Row& r : rows) {
    const std::int64_t per_token = c.kv_bytes_per_token(r.bytes);
    std::printf("  %-10s %14s %26s %26s\n", r.name, with_commas(per_token).c_str(),
                human_bytes(static_cast<double>(per_token) * c.seq_len).c_str(),
                human_bytes(static_cast<double>(per_token) * 131072).c_str());
  }
  std::printf("  (payload only; quantized formats add scales: see kvscope eval for exact bytes)\n");
  if (c.mla_kv_lora_rank > 0) {
    const std::int64_t mla = std::int64_t{c.n_layers} * (c.mla_kv_lora_rank + c.mla_rope_dim) * 2;
    std::printf("\nMLA latent cache (fp16): %d layers x (%d latent + %d RoPE) x 2 bytes = %s bytes/token\n",
                c.n_layers, c.mla_kv_lora_rank, c.mla_rope_dim, with_commas(mla).c_str());
  }
  std::printf("\n(GiB = 2^30 bytes, GB = 10^9 bytes)\n");
  return 0;
}

}  // namespace kvscope::cli
