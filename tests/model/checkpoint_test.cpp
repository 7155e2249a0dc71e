// Checkpoint loading: the real model, both formats, and every malformed-file error.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <sstream>

#include "engine/common/error.h"
#include "engine/model/checkpoint.h"
#include "engine/model/synthetic.h"
#include "tests/test_support.h"

namespace kvscope {
namespace {

using test::read_bytes;
using test::temp_path;
using test::write_bytes;

std::string error_of(const std::string& path) {
  try {
    Model::load(path);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Checkpoint, LoadsStories260K) {
  const auto& m = test::real_model();
  const ModelConfig& c = m.model->config();
  EXPECT_EQ(c.dim, 64);
  EXPECT_EQ(c.hidden_dim, 172);
  EXPECT_EQ(c.n_layers, 5);
  EXPECT_EQ(c.n_heads, 8);
  EXPECT_EQ(c.n_kv_heads, 4);
  EXPECT_EQ(c.vocab_size, 512);
  EXPECT_EQ(c.seq_len, 512);
  EXPECT_TRUE(c.shared_classifier);
  EXPECT_EQ(m.model->weights().wcls, m.model->weights().token_embedding);
  EXPECT_FALSE(m.model->is_random_weights());
}

TEST(Checkpoint, TruncatedFileNamesSizes) {
  auto bytes = read_bytes(test::real_model().model->source());
  bytes.resize(bytes.size() - 100);
  const std::string p = temp_path("truncated.bin");
  write_bytes(p, bytes);
  const std::string err = error_of(p);
  EXPECT_NE(err.find(p), std::string::npos) << err;
  EXPECT_NE(err.find("file size"), std::string::npos) << err;
  EXPECT_NE(err.find("truncated"), std::string::npos) << err;
  EXPECT_NE(err.find("1056540 bytes"), std::string::npos) << err;
}

TEST(Checkpoint, TrailingDataIsRejected) {
  auto bytes = read_bytes(test::real_model().model->source());
  bytes.push_back(0);
  const std::string p = temp_path("trailing.bin");
  write_bytes(p, bytes);
  EXPECT_NE(error_of(p).find("trailing data"), std::string::npos);
}

TEST(Checkpoint, EmptyFileAndDirectoryAndMissing) {
  const std::string empty = temp_path("empty.bin");
  write_bytes(empty, {});
  EXPECT_NE(error_of(empty).find("got 0 bytes"), std::string::npos) << error_of(empty);
  const std::string dir = temp_path("a_directory");
  std::filesystem::create_directories(dir);
  EXPECT_NE(error_of(dir).find("got a directory"), std::string::npos) << error_of(dir);
  EXPECT_NE(error_of(temp_path("missing.bin")).find("cannot open"), std::string::npos);
}

TEST(Checkpoint, BadHeaderFieldIsNamed) {
  auto bytes = read_bytes(test::real_model().model->source());
  std::int32_t bad_heads = 7;  // 64 is not a multiple of 7
  std::memcpy(bytes.data() + 12, &bad_heads, 4);
  const std::string p = temp_path("bad_heads.bin");
  write_bytes(p, bytes);
  std::string err = error_of(p);
  EXPECT_NE(err.find("header.dim: expected a multiple of n_heads (7), got 64"), std::string::npos)
      << err;

  bytes = read_bytes(test::real_model().model->source());
  std::int32_t negative_layers = -3;
  std::memcpy(bytes.data() + 8, &negative_layers, 4);
  write_bytes(p, bytes);
  err = error_of(p);
  EXPECT_NE(err.find("header.n_layers"), std::string::npos) << err;
  EXPECT_NE(err.find("got -3"), std::string::npos) << err;
}

TEST(Checkpoint, TinyFileIsRejected) {
  const std::string p = temp_path("tiny.bin");
  write_bytes(p, {1, 2, 3});
  EXPECT_NE(error_of(p).find("28-byte"), std::string::npos);
}

// Writes the model's weights in the ak42 v1 layout and checks both loaders agree.
TEST(Checkpoint, Ak42Version1MatchesLegacy) {
  const Model& m = *test::real_model().model;
  const ModelConfig& c = m.config();
  const Weights& w = m.weights();
  std::string head(256, '\0');
  std::uint32_t magic = 0x616b3432;
  std::int32_t header[8] = {1,         c.dim,        c.hidden_dim, c.n_layers,
                            c.n_heads, c.n_kv_heads, c.vocab_size, c.seq_len};
  std::memcpy(head.data(), &magic, 4);
  std::memcpy(head.data() + 4, header, sizeof header);
  head[36] = 1;  // shared classifier
  std::ostringstream body;
  body << head;
  auto put = [&](const float* p, long n) {
    body.write(reinterpret_cast<const char*>(p), static_cast<std::streamsize>(n) * 4);
  };
  const long d = c.dim, L = c.n_layers, kv = c.kv_dim(), h = c.hidden_dim;
  put(w.rms_att, L * d);
  put(w.rms_ffn, L * d);
  put(w.rms_final, d);
  put(w.token_embedding, c.vocab_size * d);
  put(w.wq, L * d * d);
  put(w.wk, L * kv * d);
  put(w.wv, L * kv * d);
  put(w.wo, L * d * d);
  put(w.w1, L * h * d);
  put(w.w2, L * d * h);
  put(w.w3, L * h * d);
  const std::string body_text = body.str();
  std::vector<char> out(body_text.begin(), body_text.end());
  const std::string p = temp_path("v1.bin");
  write_bytes(p, out);
  auto v1 = Model::load(p);
  EXPECT_EQ(v1->format(), CheckpointFormat::kAk42V1);
  EXPECT_EQ(v1->config().dim, c.dim);
  EXPECT_EQ(0, std::memcmp(v1->weights().w2, w.w2, static_cast<std::size_t>(L * d * h * 4)));
  EXPECT_EQ(0, std::memcmp(v1->weights().token_embedding, w.token_embedding,
                           static_cast<std::size_t>(c.vocab_size * d * 4)));

  out[4] = 2;  // version 2 (int8 weights) is refused by name
  write_bytes(p, out);
  EXPECT_NE(error_of(p).find("header.version"), std::string::npos);
}

TEST(Checkpoint, SyntheticRoundTripsThroughWriter) {
  SyntheticSpec spec = parse_synthetic_spec(
      "dim=32,layers=2,heads=4,kv_heads=2,hidden=48,vocab=40,seq_len=16,seed=7");
  auto m = make_synthetic_model(spec);
  EXPECT_TRUE(m->is_random_weights());
  const std::string p = temp_path("synth.bin");
  write_checkpoint(*m, p);
  auto loaded = Model::load(p);
  EXPECT_EQ(loaded->config().n_kv_heads, 2);
  EXPECT_EQ(0, std::memcmp(loaded->weights().w3, m->weights().w3, 2 * 48 * 32 * 4));
}

TEST(Checkpoint, CopiedWeightsEqualTheMappedFileAndOwnTheirMemory) {
  SyntheticSpec spec = parse_synthetic_spec(
      "dim=32,layers=2,heads=4,kv_heads=2,hidden=48,vocab=40,seq_len=16,seed=9");
  const std::string p = temp_path("copy.bin");
  write_checkpoint(*make_synthetic_model(spec), p);
  auto mapped = Model::load(p);
  auto copied = Model::load(p, WeightStorage::kCopied);
  EXPECT_EQ(mapped->storage(), WeightStorage::kMapped);
  EXPECT_EQ(copied->storage(), WeightStorage::kCopied);
  EXPECT_EQ(mapped->huge_page_fraction(), 0.0);
  const double huge = copied->huge_page_fraction();  // the kernel decides; only the range is ours
  EXPECT_TRUE(huge == -1.0 || (huge >= 0.0 && huge <= 1.0)) << huge;
  const Weights& a = mapped->weights();
  const Weights& b = copied->weights();
  EXPECT_NE(a.w1, b.w1);                                // a separate copy, not the mapping
  const std::size_t bytes = read_bytes(p).size() - 28;  // everything after the 7-int header
  EXPECT_EQ(0, std::memcmp(a.token_embedding, b.token_embedding, bytes));
  // The copy survives the file: its bytes are no longer tied to the mapping.
  std::filesystem::remove(p);
  EXPECT_EQ(0, std::memcmp(mapped->weights().w2, copied->weights().w2, 2 * 32 * 48 * 4));
}

TEST(Checkpoint, WeightStorageFlagValues) {
  EXPECT_EQ(parse_weight_storage("mmap", "--weights"), WeightStorage::kMapped);
  EXPECT_EQ(parse_weight_storage("copy", "--weights"), WeightStorage::kCopied);
  EXPECT_STREQ(weight_storage_name(WeightStorage::kCopied), "copy");
  try {
    parse_weight_storage("hugepages", "--weights");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "--weights: expected mmap or copy, got \"hugepages\"");
  }
}

}  // namespace
}  // namespace kvscope
