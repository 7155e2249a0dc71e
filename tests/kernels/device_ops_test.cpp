// DeviceOps, the CUDA backend's every kernel and GEMM, on the device under test
// (device_under_test.h: the emulator here, a GPU under scripts/gpu-check.sh, there also under
// compute-sanitizer), each against a host reference computed here in double precision. Inputs
// go up and results come back through DeviceOps' own copies, so nothing assumes that device
// memory is host memory. Tolerances are float rounding in sums of another order, stated per test.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "engine/backend/cpu/cpu_ops.h"
#include "engine/kv/kv_format.h"
#include "tests/kernels/device_under_test.h"
#include "tests/kernels/kernel_test_support.h"

namespace kvscope {
namespace {

using test::randn;

// A device allocation of n T's, freed with its owner.
template <typename T>
class Buf {
 public:
  Buf(device::DeviceOps& ops, std::size_t n)
      : ops_(ops), n_(n), p_(static_cast<T*>(ops.alloc(std::max<std::size_t>(n, 1) * sizeof(T)))) {}
  Buf(device::DeviceOps& ops, const std::vector<T>& host) : Buf(ops, host.size()) { put(host); }
  ~Buf() { ops_.release(p_); }
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;
  T* get() const { return p_; }
  void put(const std::vector<T>& host) { ops_.to_device(p_, host.data(), host.size() * sizeof(T)); }
  std::vector<T> read() const {
    std::vector<T> out(n_);
    ops_.to_host(out.data(), p_, n_ * sizeof(T));
    return out;
  }

 private:
  device::DeviceOps& ops_;
  std::size_t n_;
  T* p_;
};

// |got - want| <= atol + rtol * |want| everywhere; NaN never passes.
void expect_close(const std::vector<float>& got, const std::vector<double>& want, double atol,
                  double rtol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(double(got[i]) - want[i]);
    ASSERT_TRUE(err <= atol + rtol * std::fabs(want[i]))
        << what << " element " << i << ": " << got[i] << " vs " << want[i];
  }
}

std::vector<double> widen(const std::vector<float>& v) {
  return {v.begin(), v.end()};
}

TEST(DeviceOps, RmsNormRopeSwigluAndArgmax) {
  auto ops = test::device_ops();
  EXPECT_STREQ(ops->name(), test::device_name());
  {  // rmsnorm over SmolLM2's width, three rows
    const int rows = 3, n = 576;
    const auto x = randn(static_cast<std::size_t>(rows) * n, 1u, 3.0f);
    const auto w = randn(n, 2u);
    Buf<float> dx(*ops, x), dw(*ops, w), dout(*ops, x.size());
    ops->rmsnorm(dout.get(), dx.get(), dw.get(), rows, n, 1e-5f);
    std::vector<double> want(x.size());
    for (int r = 0; r < rows; ++r) {
      double ss = 0.0;
      for (int i = 0; i < n; ++i) ss += double(x[r * n + i]) * x[r * n + i];
      const double inv = 1.0 / std::sqrt(ss / n + 1e-5);
      for (int i = 0; i < n; ++i) want[r * n + i] = x[r * n + i] * inv * w[i];
    }
    expect_close(dout.read(), want, 1e-5, 1e-5, "rmsnorm");
  }
  {  // RoPE at SmolLM2's shape (9 query and 3 KV heads of 64, theta 100000), positions to 8191
    const int q_dim = 576, kv_dim = 192, head_dim = 64;
    const std::vector<int> pos = {0, 1, 17, 511, 4095, 8191};
    const int tokens = static_cast<int>(pos.size());
    const auto q = randn(static_cast<std::size_t>(tokens) * q_dim, 3u);
    const auto k = randn(static_cast<std::size_t>(tokens) * kv_dim, 4u);
    Buf<float> dq(*ops, q), dk(*ops, k);
    Buf<int> dpos(*ops, pos);
    ops->rope(dq.get(), dk.get(), dpos.get(), tokens, q_dim, kv_dim, head_dim, 100000.0f);
    std::vector<float> wq = q, wk = k;
    for (int t = 0; t < tokens; ++t)
      cpu::rope(wq.data() + t * q_dim, wk.data() + t * kv_dim, pos[t], q_dim, kv_dim, head_dim,
                100000.0f);
    // Angles up to 8191 rad in fp32 on both sides: sin/cos of large arguments round differently.
    expect_close(dq.read(), widen(wq), 2e-3, 1e-3, "rope q");
    expect_close(dk.read(), widen(wk), 2e-3, 1e-3, "rope k");
  }
  {  // SwiGLU over a length no launch shape divides
    const long n = 1536 * 3 + 7;
    const auto hb = randn(static_cast<std::size_t>(n), 5u, 2.0f);
    const auto hb2 = randn(static_cast<std::size_t>(n), 6u);
    Buf<float> dhb(*ops, hb), dhb2(*ops, hb2);
    ops->swiglu(dhb.get(), dhb2.get(), n);
    std::vector<double> want(hb.size());
    for (long i = 0; i < n; ++i) want[i] = hb[i] / (1.0 + std::exp(-double(hb[i]))) * hb2[i];
    expect_close(dhb.read(), want, 1e-6, 1e-5, "swiglu");
  }
  {  // argmax over SmolLM2's vocabulary, the first of equal maxima
    const int rows = 4, n = 49152;
    auto logits = randn(static_cast<std::size_t>(rows) * n, 7u);
    logits[1 * n + 300] = logits[1 * n + 40000] = 9.0f;  // a tie: the lower index wins
    logits[2 * n + n - 1] = 9.5f;                        // the last column
    logits[3 * n + 0] = 8.0f;                            // the first column
    Buf<float> dl(*ops, logits);
    Buf<int> dout(*ops, rows);
    ops->argmax(dout.get(), dl.get(), rows, n);
    std::vector<int> want(rows);
    for (int r = 0; r < rows; ++r)
      want[r] =
          static_cast<int>(std::max_element(logits.begin() + r * n, logits.begin() + (r + 1) * n) -
                           (logits.begin() + r * n));
    EXPECT_EQ(dout.read(), want);
    EXPECT_EQ(want[1], 300);
  }
}

// out[t][r] = W[r] . x[t] (+ out with accumulate) through cuBLAS in fp32, fp16 and bf16 weights:
// fp32 to summation order; 16-bit operands to their rounding (2^-11 and 2^-8 relative per
// operand, fp32 accumulation), measured against the norm of each output's terms.
TEST(DeviceOps, GemmInEveryWeightType) {
  auto ops = test::device_ops();
  const int m = 5, n = 576, d = 200;
  const auto x = randn(static_cast<std::size_t>(m) * n, 11u);
  const auto w = randn(static_cast<std::size_t>(d) * n, 12u, 0.05f);
  const auto prior = randn(static_cast<std::size_t>(m) * d, 13u);
  std::vector<double> want(prior.size()), scale(prior.size());
  for (int t = 0; t < m; ++t) {
    for (int r = 0; r < d; ++r) {
      double acc = 0.0, mag = 0.0;
      for (int i = 0; i < n; ++i) {
        acc += double(w[r * n + i]) * x[t * n + i];
        mag += std::fabs(double(w[r * n + i]) * x[t * n + i]);
      }
      want[t * d + r] = acc;
      scale[t * d + r] = mag;
    }
  }
  struct Case {
    GemmType type;
    double rel;  // of the sum of |terms|
  };
  for (const Case c :
       {Case{GemmType::kF32, 1e-5}, Case{GemmType::kF16, 2e-3}, Case{GemmType::kBF16, 1.6e-2}}) {
    for (const bool accumulate : {false, true}) {
      Buf<float> dx(*ops, x), dw(*ops, w), dout(*ops, prior);
      const void* xp = dx.get();
      const void* wp = dw.get();
      Buf<std::uint16_t> x16(*ops, x.size()), w16(*ops, w.size());
      if (c.type != GemmType::kF32) {
        const bool bf16 = c.type == GemmType::kBF16;
        ops->to_16bit(x16.get(), dx.get(), static_cast<long>(x.size()), bf16);
        ops->to_16bit(w16.get(), dw.get(), static_cast<long>(w.size()), bf16);
        xp = x16.get();
        wp = w16.get();
      }
      ops->gemm(dout.get(), xp, wp, c.type, m, n, d, accumulate);
      const std::vector<float> got = dout.read();
      for (std::size_t i = 0; i < got.size(); ++i) {
        const double expect = want[i] + (accumulate ? prior[i] : 0.0);
        ASSERT_LE(std::fabs(got[i] - expect), c.rel * scale[i] + 1e-5)
            << gemm_type_name(c.type) << (accumulate ? " accumulate" : "") << " element " << i;
      }
    }
  }
}

// One layer's paged K/V pool on the device, written token by token through kv_write into blocks
// scattered over the pool, as the backend lays it out.
struct DevicePool {
  KvFormat format;
  int block_size, kv_heads, head_dim, tokens;
  std::vector<int> table;  // the sequence's blocks, in a shuffled order
  std::size_t tile;
  Buf<unsigned char> k, v;
  Buf<int> dtable;
  DevicePool(device::DeviceOps& ops, const std::string& name, int bs, int kvh, int hd, int n,
             unsigned seed)
      : format(parse_kv_format(name, "test")),
        block_size(bs),
        kv_heads(kvh),
        head_dim(hd),
        tokens(n),
        table(shuffled_blocks((n + bs - 1) / bs + 3, (n + bs - 1) / bs, seed)),
        tile(format.tile_bytes(bs, kvh, hd)),
        k(ops, tile * ((n + bs - 1) / bs + 3)),
        v(ops, tile * ((n + bs - 1) / bs + 3)),
        dtable(ops, table) {}
  device::DeviceTiles tiles(KvKind kind) const {
    return {kind == KvKind::kKey ? k.get() : v.get(), static_cast<long>(tile),
            cuda_kv_code(format, kind), format.effective_group(kv_heads * head_dim), 0};
  }
  device::PagedPool pool(int slots, const unsigned char* live) const {
    device::PagedPool p;
    p.k = tiles(KvKind::kKey);
    p.v = tiles(KvKind::kValue);
    p.block_table = dtable.get();
    p.num_slots = slots;
    p.block_size = block_size;
    p.kv_heads = kv_heads;
    p.head_dim = head_dim;
    p.live = live;
    return p;
  }
  // The pool's `tokens` K and V rows (host, [tokens][kv_dim]) written to slots 0.. through
  // kv_write, then decoded back by kv_gather: the rows attention reads, K then V.
  std::pair<std::vector<float>, std::vector<float>> write_and_gather(
      device::DeviceOps& ops, const std::vector<float>& k_rows,
      const std::vector<float>& v_rows) const {
    const std::size_t kv_dim = static_cast<std::size_t>(kv_heads) * head_dim;
    Buf<float> dk(ops, k_rows), dv(ops, v_rows), gk(ops, k_rows.size()), gv(ops, v_rows.size());
    for (int t = 0; t < tokens; ++t) {
      ops.kv_write(tiles(KvKind::kKey), tiles(KvKind::kValue), dtable.get(), t, block_size,
                   dk.get() + t * kv_dim, dv.get() + t * kv_dim, kv_heads, head_dim);
    }
    ops.kv_gather(gk.get(), tiles(KvKind::kKey), dtable.get(), tokens, kv_heads, head_dim,
                  block_size);
    ops.kv_gather(gv.get(), tiles(KvKind::kValue), dtable.get(), tokens, kv_heads, head_dim,
                  block_size);
    return {gk.read(), gv.read()};
  }
  static std::vector<int> shuffled_blocks(int pool, int used, unsigned seed) {
    std::vector<int> all(static_cast<std::size_t>(pool));
    std::iota(all.begin(), all.end(), 0);
    std::shuffle(all.begin(), all.end(), std::mt19937(seed));
    all.resize(static_cast<std::size_t>(used));
    return all;
  }
};

// softmax(q . K^T / sqrt(d)) V per query head in double, over the live slots of gathered rows.
void reference_attention(const std::vector<float>& q, const std::vector<float>& k,
                         const std::vector<float>& v, const std::vector<unsigned char>& live,
                         int heads, int kv_heads, int head_dim, int slots, std::vector<double>* out,
                         std::vector<double>* weights) {
  const int kv_dim = kv_heads * head_dim;
  out->assign(static_cast<std::size_t>(heads) * head_dim, 0.0);
  weights->assign(static_cast<std::size_t>(heads) * slots, 0.0);
  for (int h = 0; h < heads; ++h) {
    const int g = h / (heads / kv_heads);
    std::vector<double> s(static_cast<std::size_t>(slots), -INFINITY);
    double top = -INFINITY;
    for (int t = 0; t < slots; ++t) {
      if (!live.empty() && live[t] == 0) continue;
      double dot = 0.0;
      for (int i = 0; i < head_dim; ++i)
        dot += double(q[h * head_dim + i]) *
               k[static_cast<std::size_t>(t) * kv_dim + g * head_dim + i];
      s[t] = dot / std::sqrt(double(head_dim));
      top = std::max(top, s[t]);
    }
    double total = 0.0;
    for (int t = 0; t < slots; ++t) total += s[t] == -INFINITY ? 0.0 : std::exp(s[t] - top);
    for (int t = 0; t < slots; ++t) {
      const double p = s[t] == -INFINITY ? 0.0 : std::exp(s[t] - top) / total;
      (*weights)[static_cast<std::size_t>(h) * slots + t] = p;
      for (int i = 0; i < head_dim; ++i)
        (*out)[h * head_dim + i] += p * v[static_cast<std::size_t>(t) * kv_dim + g * head_dim + i];
    }
  }
}

// kv_write quantizes each token's rows into the pool's format and kv_gather decodes them back,
// within the format's step; decode attention over the pool, one pass (37 slots) and split along
// the sequence (5,000 slots, past the one-pass limit), with a fifth of the slots evicted, equals
// the double-precision attention over the gathered rows, and so do its captured softmax rows.
// Llama-3-8B's attention group (32 query heads over 8 KV heads of 128) at block size 16.
TEST(DeviceOps, PagedAttentionInEveryFormatOnePassAndSplit) {
  auto ops = test::device_ops();
  const int heads = 32, kv_heads = 8, head_dim = 128, bs = 16, kv_dim = kv_heads * head_dim;
  struct Format {
    const char* name;
    double step;  // largest decode error, relative to the row's largest magnitude
  };
  const Format formats[] = {{"fp32", 0.0},    {"fp16", 1e-3},     {"bf16", 8e-3},
                            {"int8", 8.5e-3}, {"fp8-e4m3", 7e-2}, {"fp8-e5m2", 0.13},
                            {"int4", 0.14}};
  // The emulator runs every thread of every launch on this CPU, and compute-sanitizer checks
  // every access of every launch (KVSCOPE_DEVICE_TESTS_QUICK=1, scripts/gpu-check.sh): there,
  // the long context only in fp16 (the split path is the same code in every format).
  const char* quick_env = std::getenv("KVSCOPE_DEVICE_TESTS_QUICK");
  const bool quick = !test::on_gpu() || (quick_env != nullptr && std::string(quick_env) == "1");
  for (const Format& f : formats) {
    for (const int slots : {37, 5000}) {
      if (slots > device::DeviceOps::batch_max_slots() && quick && std::string(f.name) != "fp16")
        continue;
      const std::string what = std::string(f.name) + " " + std::to_string(slots) + " slots";
      DevicePool pool(*ops, f.name, bs, kv_heads, head_dim, slots, 21u + slots);
      const auto k = randn(static_cast<std::size_t>(slots) * kv_dim, 22u);
      const auto v = randn(static_cast<std::size_t>(slots) * kv_dim, 23u);
      const auto [kr, vr] = pool.write_and_gather(*ops, k, v);
      for (const auto& [in, back] : {std::pair{&k, &kr}, std::pair{&v, &vr}}) {
        for (int t = 0; t < slots; ++t) {
          const float* row = in->data() + static_cast<std::size_t>(t) * kv_dim;
          const float big = std::fabs(*std::max_element(
              row, row + kv_dim, [](float a, float b) { return std::fabs(a) < std::fabs(b); }));
          for (int i = 0; i < kv_dim; ++i) {
            const std::size_t at = static_cast<std::size_t>(t) * kv_dim + i;
            ASSERT_LE(std::fabs((*back)[at] - (*in)[at]), f.step * big)
                << what << (in == &k ? " K" : " V") << " token " << t << " value " << i;
          }
        }
      }
      std::vector<unsigned char> live(static_cast<std::size_t>(slots), 1);
      for (int t = 3; t < slots; t += 5) live[t] = 0;
      Buf<unsigned char> dlive(*ops, live);
      const auto q = randn(static_cast<std::size_t>(heads) * head_dim, 24u);
      Buf<float> dq(*ops, q), dout(*ops, q.size()),
          dw(*ops, static_cast<std::size_t>(heads) * slots);
      ops->paged_attention(dout.get(), dq.get(), pool.pool(slots, dlive.get()), heads, dw.get());
      std::vector<double> want, want_w;
      reference_attention(q, kr, vr, live, heads, kv_heads, head_dim, slots, &want, &want_w);
      expect_close(dout.read(), want, 2e-5, 1e-4, what + " output");
      expect_close(dw.read(), want_w, 1e-6, 1e-4, what + " softmax rows");
      // Without a live map and without capture: every slot counts, and the output is the same
      // function.
      ops->paged_attention(dout.get(), dq.get(), pool.pool(slots, nullptr), heads, nullptr);
      reference_attention(q, kr, vr, {}, heads, kv_heads, head_dim, slots, &want, &want_w);
      expect_close(dout.read(), want, 2e-5, 1e-4, what + " output, all live");
    }
  }
}

// Rows at any alignment and blocks of any size: one KV head of 8 with blocks of 1 and 3 tokens
// puts the int8 and FP8 rows at 10- and 30-byte strides (no 8-byte loads: value by value) and
// takes the block index by division; the result is the same function.
TEST(DeviceOps, AttentionOverUnalignedRowsAndOddBlockSizes) {
  auto ops = test::device_ops();
  const int heads = 2, kv_heads = 1, head_dim = 8, slots = 50, kv_dim = kv_heads * head_dim;
  for (const char* name : {"int8", "fp8-e5m2", "fp16", "fp32"}) {
    for (const int bs : {1, 3}) {
      const std::string what = std::string(name) + " block size " + std::to_string(bs);
      DevicePool pool(*ops, name, bs, kv_heads, head_dim, slots, 41u + bs);
      const auto k = randn(static_cast<std::size_t>(slots) * kv_dim, 42u);
      const auto v = randn(static_cast<std::size_t>(slots) * kv_dim, 43u);
      const auto [kr, vr] = pool.write_and_gather(*ops, k, v);
      const auto q = randn(static_cast<std::size_t>(heads) * head_dim, 44u);
      Buf<float> dq(*ops, q), dout(*ops, q.size()),
          dw(*ops, static_cast<std::size_t>(heads) * slots);
      ops->paged_attention(dout.get(), dq.get(), pool.pool(slots, nullptr), heads, dw.get());
      std::vector<double> want, want_w;
      reference_attention(q, kr, vr, {}, heads, kv_heads, head_dim, slots, &want, &want_w);
      expect_close(dout.read(), want, 2e-5, 1e-4, what + " output");
      expect_close(dw.read(), want_w, 1e-6, 1e-4, what + " softmax rows");
    }
  }
}

// One launch for a step of three queries over their own sequences in one pool (the batched
// decode path the backend takes), each query's output and softmax rows equal to that query's
// own single-sequence attention.
TEST(DeviceOps, BatchedAttentionIsEachQuerysOwn) {
  auto ops = test::device_ops();
  const int heads = 9, kv_heads = 3, head_dim = 64, bs = 16, kv_dim = kv_heads * head_dim;
  const std::vector<int> lengths = {1, 70, 333};
  const int n = static_cast<int>(lengths.size());
  const int total = std::accumulate(lengths.begin(), lengths.end(), 0);
  DevicePool pool(*ops, "fp16", bs, kv_heads, head_dim, total + bs * n, 31u);
  const auto k = randn(static_cast<std::size_t>(total) * kv_dim, 32u);
  const auto v = randn(static_cast<std::size_t>(total) * kv_dim, 33u);
  Buf<float> dk(*ops, k), dv(*ops, v);
  // Sequence s owns the pool table's blocks from first_block[s] on.
  std::vector<int> tables, meta;
  int row = 0, weights_at = 0;
  std::vector<int> first_block;
  for (int s = 0; s < n; ++s) {
    first_block.push_back(static_cast<int>(tables.size()));
    const int blocks = (lengths[s] + bs - 1) / bs;
    for (int b = 0; b < blocks; ++b) tables.push_back(pool.table[first_block[s] + b]);
    meta.insert(meta.end(), {first_block[s], lengths[s], -1, weights_at, -1, -1, -1, -1});
    weights_at += heads * lengths[s];
    for (int t = 0; t < lengths[s]; ++t, ++row) {
      ops->kv_write(pool.tiles(KvKind::kKey), pool.tiles(KvKind::kValue),
                    pool.dtable.get() + first_block[s], t, bs,
                    dk.get() + static_cast<std::size_t>(row) * kv_dim,
                    dv.get() + static_cast<std::size_t>(row) * kv_dim, kv_heads, head_dim);
    }
  }
  ASSERT_EQ(static_cast<int>(meta.size()), n * device::DeviceOps::batch_meta_ints());
  Buf<int> dtables(*ops, tables), dmeta(*ops, meta);
  const auto q = randn(static_cast<std::size_t>(n) * heads * head_dim, 34u);
  Buf<float> dq(*ops, q), dout(*ops, q.size()), dw(*ops, static_cast<std::size_t>(weights_at));
  device::PagedBatchPool b;
  b.k = pool.tiles(KvKind::kKey);
  b.v = pool.tiles(KvKind::kValue);
  b.block_size = bs;
  b.kv_heads = kv_heads;
  b.head_dim = head_dim;
  b.tables = dtables.get();
  b.meta = dmeta.get();
  ops->paged_attention_batch(dout.get(), dq.get(), b, n, heads,
                             *std::max_element(lengths.begin(), lengths.end()), dw.get());
  const std::vector<float> got = dout.read(), got_w = dw.read();
  for (int s = 0; s < n; ++s) {
    const std::size_t qa = static_cast<std::size_t>(s) * heads * head_dim;
    Buf<float> q1(*ops, std::vector<float>(q.begin() + qa, q.begin() + qa + heads * head_dim));
    Buf<float> o1(*ops, static_cast<std::size_t>(heads) * head_dim),
        w1(*ops, static_cast<std::size_t>(heads) * lengths[s]);
    device::PagedPool one = pool.pool(lengths[s], nullptr);
    one.block_table = dtables.get() + first_block[s];
    ops->paged_attention(o1.get(), q1.get(), one, heads, w1.get());
    const std::vector<float> want = o1.read(), want_w = w1.read();
    for (std::size_t i = 0; i < want.size(); ++i)
      ASSERT_NEAR(got[qa + i], want[i], 1e-5) << "query " << s << " output " << i;
    const std::size_t wa = static_cast<std::size_t>(meta[s * 8 + 3]);
    for (std::size_t i = 0; i < want_w.size(); ++i)
      ASSERT_NEAR(got_w[wa + i], want_w[i], 1e-6) << "query " << s << " row value " << i;
  }
}

}  // namespace
}  // namespace kvscope
