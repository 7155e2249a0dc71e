// See backend_flag.h.
#include "cli/backend_flag.h"

#include <cstdio>
#include <initializer_list>

#include "engine/common/error.h"
#include "engine/model/checkpoint.h"

namespace kvscope::cli {

namespace {

// The column where a help line's description starts: after the flag and its gap, or, for a
// continuation line, after its indentation (0 when there is none).
std::size_t description_column(const std::string& line) {
  std::size_t at = 0;
  if (line.rfind("  --", 0) == 0) at = line.find("  ", 2);
  if (at == std::string::npos) return 0;
  const std::size_t text = line.find_first_not_of(' ', at);
  return text == std::string::npos ? 0 : text;
}

// "  FLAG" then the description lines (each at most 63 characters) from `column`; the first on
// the flag's line when it fits there.
std::string help_entry(const std::string& flag, std::initializer_list<const char*> lines,
                       std::size_t column) {
  std::string out = "  " + flag;
  bool first = true;
  for (const char* l : lines) {
    if (first && out.size() + 2 <= column) {
      out.append(column - out.size(), ' ');
    } else {
      out += "\n";
      out.append(column, ' ');
    }
    out += l;
    first = false;
  }
  return out;
}

}  // namespace

std::string with_backend_help(const char* help) {
  std::string s = help;
  const std::string mark = "%BACKEND%";
  const std::size_t at = s.find(mark);
  if (at == std::string::npos) return s;
  // The description column of the line before the mark, so the entries line up with it.
  const std::size_t line_start = at >= 2 ? s.rfind('\n', at - 2) : std::string::npos;
  const std::size_t from = line_start == std::string::npos ? 0 : line_start + 1;
  std::size_t column = at > from ? description_column(s.substr(from, at - 1 - from)) : 0;
  if (column < 29) column = 29;
  const std::string text =
      help_entry("--backend auto|cpu|cuda|cuda-sim",
                 {"what runs the forward pass (default auto: a CUDA GPU when",
                  "there is one and it covers the run, else the CPU); cuda-sim:",
                  "the CUDA backend on the emulated device (slow; docs/kernels.md)"},
                 column) +
      "\n" +
      help_entry("--device-weights f32|f16|bf16",
                 {"the CUDA backends' cuBLAS GEMM weights (default f16; fp32", "accumulation)"},
                 column);
  s.replace(at, mark.size(), text);
  return s;
}

std::string cuda_gap(const RunNeeds& needs) {
  if (needs.model != nullptr && needs.model->native() != nullptr)
    return "quantized weights (--weight-format f32 dequantizes them)";
  if (!cuda_covers_kv_format(needs.k_format) || !cuda_covers_kv_format(needs.v_format)) {
    return "K/V format " + needs.k_format.name() + "/" + needs.v_format.name() +
           " (fp32, fp16, bf16, int8, fp8, int4 and int2 are covered)";
  }
  if (needs.eviction) return "token eviction";
  if (needs.mla) return "MLA latents";
  return needs.other;
}

std::unique_ptr<Backend> make_backend(const std::string& value, int threads,
                                      const std::string& device_weights, const RunNeeds& needs) {
  const GemmType weights = parse_gemm_type(device_weights, "--device-weights");
  if (value == "cpu") return make_cpu_backend(threads);
  const std::string gap = cuda_gap(needs);
  if ((value == "cuda" || value == "cuda-sim") && !gap.empty()) {
    throw Error("--backend", value + ": the CUDA backend does not cover " + gap +
                                 " yet (--backend cpu runs it)");
  }
  if (value == "cuda-sim") return make_cuda_sim_backend(weights);
  if (value == "cuda" || value == "auto") {
    std::string why;
    auto cuda = make_cuda_backend(weights, &why);
    if (value == "cuda") {
      if (cuda == nullptr) throw Error("--backend", "cuda: CUDA unavailable: " + why);
      return cuda;
    }
    if (cuda != nullptr && gap.empty()) return cuda;
    static bool said = false;
    if (!said) {
      said = true;
      if (cuda == nullptr)
        std::fprintf(stderr, "CUDA unavailable: %s; using CPU\n", why.c_str());
      else
        std::fprintf(stderr, "CUDA: the backend does not cover %s yet; using CPU\n", gap.c_str());
    }
    return make_cpu_backend(threads);
  }
  throw Error("--backend", "expected auto, cpu, cuda or cuda-sim, got \"" + value + "\"");
}

}  // namespace kvscope::cli
