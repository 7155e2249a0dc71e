// DeviceOps: what kvscope's CUDA backend asks of a device, on device pointers: memory, copies,
// cuBLAS GEMMs and the kernels of kernels/ops. One body (device_ops_body.inc) is compiled twice:
// by nvcc against the CUDA runtime and cuBLAS (device_ops_cuda.cu: a real GPU), and by g++
// against the project's stand-ins and SIMT emulator (device_ops_emulated.cpp: this machine).
// This header is plain C++17 with no CUDA or engine types, so both compilers read it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>

namespace kvscope::device {

// What a failed runtime or cuBLAS call throws: the call and the runtime's own words.
class DeviceError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The weights' type on the device; the GEMMs accumulate in fp32 whatever it is.
enum class GemmType { kF32, kF16, kBF16 };

// A K/V format as the kernels read and write it (the values of kernels::KvCode). KIVI keys are
// kKiviKey4 / kKiviKey2; KIVI values are stored as kInt4 / kInt2 (the same per-token groups).
enum class KvCode : int {
  kF32 = 0,
  kF16,
  kBF16,
  kInt8,
  kE4M3,
  kE5M2,
  kInt4,
  kInt2,
  kKiviKey4,
  kKiviKey2
};

// One layer's K or V tiles on the device (layout as engine/kv/kv_storage.h).
struct DeviceTiles {
  unsigned char* base = nullptr;  // tile of physical block 0
  long tile_bytes = 0;
  KvCode code = KvCode::kF32;
  int group = 0;     // int4 / int2 / KIVI values: values per scale-and-zero group along a row
  int residual = 0;  // KIVI: tokens per group (0 for the per-token formats)
};

// A paged K/V pool on the device, one layer, as one query's attention reads it.
struct PagedPool {
  DeviceTiles k, v;
  const int* block_table = nullptr;  // device memory
  int num_slots = 0;
  int block_size = 0;
  int kv_heads = 0;
  int head_dim = 0;
  const unsigned char* live =
      nullptr;  // device memory [num_slots]: 0 = evicted; nullptr = all live
  // KIVI: the open group's full-precision rows [residual][kv_heads * head_dim] (device memory)
  // for K / V slots from open_k_start / open_v_start on; nullptr when the kind has none.
  const float* open_k = nullptr;
  const float* open_v = nullptr;
  int open_k_start = 0;
  int open_v_start = 0;
};

// The queries of one engine step over one pool (one layer), each over its own sequence:
// per query, meta[batch_meta_ints() i ..] = {offset of its block table in `tables`, its
// num_slots, offset of its live map in `live` or -1, offset of its captured rows in the weights
// or -1, then for K and for V (KIVI): the first slot of its open group and the offset of that
// group's rows in `staging`, or -1}. Device memory.
struct PagedBatchPool {
  DeviceTiles k, v;
  int block_size = 0;
  int kv_heads = 0;
  int head_dim = 0;
  const int* tables = nullptr;
  const int* meta = nullptr;
  const unsigned char* live = nullptr;
  const float* staging = nullptr;
};

// One layer of a sequence's MLA latent cache, as mode B's attention reads it: latents in the K
// region's tiles ([block_size][rank]), RoPE keys in the V region's ([block_size][rope_heads]
// [rope_dim]; rope_heads 0: none). Device memory.
struct LatentPool {
  DeviceTiles latents, rope;
  const int* block_table = nullptr;
  int num_slots = 0;
  int block_size = 0;
  int rank = 0;
  int rope_heads = 0;
  int rope_dim = 0;
  const unsigned char* live = nullptr;  // [num_slots] 0 = evicted; nullptr = all live
};

// Copies between host and device since a DeviceOps was made (cudaMemcpy host to device and
// device to host): what a step costs on the PCIe bus.
struct Traffic {
  std::uint64_t to_device_bytes = 0, to_device_copies = 0;
  std::uint64_t to_host_bytes = 0, to_host_copies = 0;
};

class DeviceOps {
 public:
  virtual ~DeviceOps() = default;
  virtual const char* name() const = 0;

  virtual void* alloc(std::size_t bytes) = 0;
  virtual void release(void* p) noexcept = 0;
  virtual void to_device(void* dst, const void* src, std::size_t bytes) = 0;
  virtual void to_host(void* dst, const void* src, std::size_t bytes) = 0;
  virtual Traffic traffic() const = 0;
  virtual void synchronize() = 0;
  virtual void copy_on_device(void* dst, const void* src, std::size_t bytes) = 0;
  // Milliseconds the device spends on what `work` launches (events around it).
  virtual double time_ms(const std::function<void()>& work) = 0;
  // Synthetic K/V in every slot of num_blocks tiles (benchmarks; kernels/ops/kv_fill.cuh).
  virtual void fill_kv(const DeviceTiles& tiles, long num_blocks, int block_size, int kv_heads,
                       int head_dim, std::uint32_t seed) = 0;

  // out[t][r] = W[r] . x[t] for t < m, r < d: W row-major [d][n] and x [m][n] both in `type`
  // (for 16-bit weights, activations rounded by to_16bit first), out fp32 [m][d]. With
  // `accumulate` the product is added to out (cuBLAS's beta = 1: a residual add in the GEMM).
  virtual void gemm(float* out, const void* x, const void* w, GemmType type, int m, int n, int d,
                    bool accumulate) = 0;
  // out[r] = the index of row r's largest value, the lowest among equals (greedy sampling;
  // kernels/ops/argmax.cuh), r < rows; rows of n floats.
  virtual void argmax(int* out, const float* rows_in, int rows, int n) = 0;
  // dst[i] = src[i] rounded to fp16 / bf16 bits (weights converted on upload).
  virtual void to_16bit(std::uint16_t* dst, const float* src, long n, bool bf16) = 0;
  virtual void rmsnorm(float* out, const float* x, const float* w, int rows, int n, float eps) = 0;
  virtual void rope(float* q, float* k, const int* pos, int tokens, int q_dim, int kv_dim,
                    int head_dim, float theta) = 0;
  virtual void swiglu(float* hb, const float* hb2, long n) = 0;
  // One token's K and V rows into `slot` of the pool, quantized to its formats; tiles whose base
  // is nullptr are skipped (a KIVI kind, whose tokens go to its group's staging).
  virtual void kv_write(const DeviceTiles& k_tiles, const DeviceTiles& v_tiles,
                        const int* block_table, int slot, int block_size, const float* k,
                        const float* v, int kv_heads, int head_dim) = 0;
  // Decode attention of n_queries queries in one launch (q and out [n_queries][n_heads][head_dim];
  // every num_slots at most max_slots <= batch_max_slots()), captured rows into `weights` at
  // the meta offsets.
  virtual void paged_attention_batch(float* out, const float* q, const PagedBatchPool& p,
                                     int n_queries, int n_heads, int max_slots, float* weights) = 0;
  static constexpr int batch_max_slots() { return 4096; }
  static constexpr int batch_meta_ints() { return 8; }
  // KIVI: quantizes the filled group of K (key) or V starting at slot g0 (a multiple of
  // t.residual) from its full-precision rows `staging` [residual][kv_dim] into the tiles.
  virtual void kivi_flush(const DeviceTiles& t, bool key, const int* block_table, int g0,
                          int block_size, const float* staging, int kv_dim) = 0;
  // Token eviction's position shift: the keys of `count` cached tokens rotated by a further
  // delta positions in all n_layers layers and stored again in the pool's format.
  // rot (device memory) holds {physical block, row in block, delta} per token; k_tiles is layer
  // 0's, layer l's start l * layer_stride bytes further.
  virtual void rotate_keys(const DeviceTiles& k_tiles, long layer_stride, int n_layers,
                           const int* rot, int count, int block_size, int kv_heads, int head_dim,
                           float theta) = 0;
  // MLA latent cache (kernels/ops/mla.cuh). row [kv_heads * nope_dims + kv_heads * head_dim] =
  // [k's nope dims rotated back from pos; v], rope [kv_heads][rope_dims] = k's rotary dims.
  virtual void mla_latent_input(float* row, float* rope, const float* k, const float* v,
                                const int* nope_index, const int* rope_index, int kv_heads,
                                int head_dim, int nope_dims, int rope_dims, int pos,
                                float theta) = 0;
  // out[t] = slot t's row of the tiles decoded to fp32, t < n (through the block table).
  virtual void kv_gather(float* out, const DeviceTiles& tiles, const int* block_table, int n,
                         int kv_heads, int head_dim, int block_size) = 0;
  // Mode B: q_lat [n_heads][rank] = W_uk_g^T (q's nope dims rotated back from pos), q_rope
  // [n_heads][rope_dims] = q's rotary dims.
  virtual void mla_absorb_query(float* q_lat, float* q_rope, const float* q, const float* w_uk,
                                const int* nope_index, const int* rope_index, int n_heads,
                                int kv_heads, int head_dim, int nope_dims, int rope_dims, int rank,
                                int pos, float theta) = 0;
  // Mode B: ctx [n_heads][rank] = softmax((q_lat . c_t + q_rope . k_rope_t) / score_divisor)
  // weighted latents; softmax rows into `weights` [n_heads][num_slots] when set. One pass up to
  // latent_max_slots() slots, split along the sequence past it.
  virtual void mla_latent_attention(float* ctx, float* weights, const float* q_lat,
                                    const float* q_rope, const LatentPool& kv, int n_heads,
                                    float score_divisor) = 0;
  static constexpr int latent_max_slots() { return 4096; }  // one pass
  // Decode attention of n_heads query heads over the pool: one pass for short contexts, split
  // along the sequence (split-K) for long ones. With `weights` set ([n_heads][num_slots] on the
  // device), each head's softmax row is written there too.
  virtual void paged_attention(float* out, const float* q, const PagedPool& kv, int n_heads,
                               float* weights) = 0;
};

// The emulated device: the stand-ins of kernels/sim/cuda_api_sim.h and the SIMT emulator.
std::unique_ptr<DeviceOps> make_emulated_device_ops();

// The real device through the CUDA runtime and cuBLAS: nullptr when there is none, with *why
// set to the reason (the runtime's own words, or that this build has no CUDA backend).
std::unique_ptr<DeviceOps> make_cuda_device_ops(std::string* why);
// The first GPU's name as its driver reports it ("NVIDIA H200"), or "" when there is none.
std::string cuda_device_name();

}  // namespace kvscope::device
