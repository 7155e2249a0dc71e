// GGUF parsing and validation. Layout (little-endian): magic "GGUF", u32 version, u64 tensor
// count, u64 metadata count; metadata as (string key, u32 type, value); tensor infos as (string
// name, u32 n_dims, u64 ne[n_dims], u32 ggml type, u64 offset relative to the data section); the
// data section starts at the next multiple of general.alignment (default 32). Strings are a u64
// length and that many bytes; arrays a u32 element type, a u64 count and the items.
#include "engine/model/gguf.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "engine/common/error.h"
#include "engine/model/ggml_types.h"

namespace kvscope {
namespace {

constexpr char kMagic[4] = {'G', 'G', 'U', 'F'};
constexpr int kMaxDims = 4;        // GGML_MAX_DIMS
constexpr int kMaxArrayDepth = 8;  // arrays of arrays of ...
constexpr std::uint64_t kMaxStringBytes = std::uint64_t{1} << 30;

// Reads little-endian values off the mapping, failing with the offset and field when short.
class Cursor {
 public:
  Cursor(std::span<const std::byte> bytes, const std::string& path) : bytes_(bytes), path_(path) {}

  std::uint64_t offset() const { return off_; }
  std::uint64_t remaining() const { return bytes_.size() - off_; }

  [[noreturn]] void fail(const std::string& field, const std::string& expected,
                         const std::string& got, std::uint64_t at) const {
    fail_expected(path_ + ": byte " + std::to_string(at) + ": " + field, expected, got);
  }
  [[noreturn]] void fail(const std::string& field, const std::string& expected,
                         const std::string& got) const {
    fail(field, expected, got, off_);
  }

  void need(std::uint64_t n, const std::string& field) const {
    if (n > remaining()) {
      fail(field, std::to_string(n) + " more bytes",
           "end of file (" + std::to_string(remaining()) + " bytes left; truncated?)");
    }
  }

  template <typename T>
  T read(const std::string& field) {
    need(sizeof(T), field);
    T v;
    std::memcpy(&v, bytes_.data() + off_, sizeof(T));
    off_ += sizeof(T);
    return v;
  }

  std::string read_string(const std::string& field) {
    const std::uint64_t at = off_;
    const auto len = read<std::uint64_t>(field + " length");
    if (len > kMaxStringBytes || len > remaining()) {
      fail(field + " length",
           "at most " + std::to_string(std::min(remaining(), kMaxStringBytes)) +
               " bytes (what is left of the file)",
           std::to_string(len), at);
    }
    std::string s(reinterpret_cast<const char*>(bytes_.data() + off_), len);
    off_ += len;
    return s;
  }

 private:
  std::span<const std::byte> bytes_;
  const std::string& path_;
  std::uint64_t off_ = 0;
};

// The smallest encoding of one value of type t (to bound counts before allocating).
std::uint64_t min_value_bytes(GgufType t) {
  switch (t) {
    case GgufType::kUint8:
    case GgufType::kInt8:
    case GgufType::kBool:
      return 1;
    case GgufType::kUint16:
    case GgufType::kInt16:
      return 2;
    case GgufType::kUint32:
    case GgufType::kInt32:
    case GgufType::kFloat32:
      return 4;
    case GgufType::kString:
    case GgufType::kUint64:
    case GgufType::kInt64:
    case GgufType::kFloat64:
      return 8;
    case GgufType::kArray:
      return 12;
  }
  return 1;
}

bool is_known_type(std::uint32_t t) {
  return t <= static_cast<std::uint32_t>(GgufType::kFloat64);
}

GgufValue read_value(Cursor& c, GgufType type, const std::string& field, int depth) {
  GgufValue v;
  v.type = type;
  switch (type) {
    case GgufType::kUint8:
      v.data = std::uint64_t{c.read<std::uint8_t>(field)};
      break;
    case GgufType::kUint16:
      v.data = std::uint64_t{c.read<std::uint16_t>(field)};
      break;
    case GgufType::kUint32:
      v.data = std::uint64_t{c.read<std::uint32_t>(field)};
      break;
    case GgufType::kUint64:
      v.data = c.read<std::uint64_t>(field);
      break;
    case GgufType::kInt8:
      v.data = std::int64_t{c.read<std::int8_t>(field)};
      break;
    case GgufType::kInt16:
      v.data = std::int64_t{c.read<std::int16_t>(field)};
      break;
    case GgufType::kInt32:
      v.data = std::int64_t{c.read<std::int32_t>(field)};
      break;
    case GgufType::kInt64:
      v.data = c.read<std::int64_t>(field);
      break;
    case GgufType::kFloat32:
      v.data = double{c.read<float>(field)};
      break;
    case GgufType::kFloat64:
      v.data = c.read<double>(field);
      break;
    case GgufType::kString:
      v.data = c.read_string(field);
      break;
    case GgufType::kBool: {
      const std::uint64_t at = c.offset();
      const auto b = c.read<std::uint8_t>(field);
      if (b > 1) c.fail(field, "a bool (0 or 1)", std::to_string(b), at);
      v.data = b == 1;
      break;
    }
    case GgufType::kArray: {
      if (depth >= kMaxArrayDepth) {
        c.fail(field, "arrays nested at most " + std::to_string(kMaxArrayDepth) + " deep",
               "a deeper array");
      }
      const std::uint64_t at = c.offset();
      const auto elem = c.read<std::uint32_t>(field + " element type");
      if (!is_known_type(elem)) {
        c.fail(field + " element type", "a GGUF value type in [0, 12]", std::to_string(elem), at);
      }
      v.elem_type = static_cast<GgufType>(elem);
      const std::uint64_t count_at = c.offset();
      const auto count = c.read<std::uint64_t>(field + " count");
      if (count > c.remaining() / min_value_bytes(v.elem_type)) {
        c.fail(field + " count",
               "at most " + std::to_string(c.remaining() / min_value_bytes(v.elem_type)) +
                   " items (what is left of the file)",
               std::to_string(count), count_at);
      }
      std::vector<GgufValue> items;
      items.reserve(count);
      for (std::uint64_t i = 0; i < count; ++i) {
        items.push_back(
            read_value(c, v.elem_type, field + "[" + std::to_string(i) + "]", depth + 1));
      }
      v.data = std::move(items);
      break;
    }
  }
  return v;
}

std::string quote(const std::string& s) {
  std::string out = "\"";
  for (char ch : s.substr(0, 60)) {
    const auto u = static_cast<unsigned char>(ch);
    if (u < 0x20 || u == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", u);
      out += buf;
    } else {
      out += ch;
    }
  }
  return out + (s.size() > 60 ? "...\"" : "\"");
}

// The fixed header: magic, version and the two counts.
struct Header {
  std::uint32_t version = 0;
  std::uint64_t num_tensors = 0;
  std::uint64_t num_kv = 0;
};

Header read_header(Cursor& c, std::span<const std::byte> bytes) {
  Header h;
  c.need(4, "magic");
  if (std::memcmp(bytes.data(), kMagic, 4) != 0) {
    c.fail("magic", "\"GGUF\" (a GGUF model file)",
           quote(std::string(reinterpret_cast<const char*>(bytes.data()), 4)));
  }
  c.read<std::uint32_t>("magic");
  h.version = c.read<std::uint32_t>("version");
  if (h.version != 2 && h.version != 3) {
    c.fail("version", "2 or 3 (v1 used 32-bit counts and is not supported)",
           std::to_string(h.version), 4);
  }
  h.num_tensors = c.read<std::uint64_t>("tensor_count");
  h.num_kv = c.read<std::uint64_t>("metadata_kv_count");
  // A tensor info takes at least 8 (name) + 4 + 8 + 4 + 8 bytes; a key/value 8 + 4 + 1.
  // More than the file can hold: a truncated copy (an interrupted download) or a corrupt one.
  const std::string holds = " (all that the file's " + std::to_string(bytes.size()) +
                            " bytes can hold; the file is truncated or corrupt)";
  if (h.num_tensors > c.remaining() / 32) {
    c.fail("tensor_count", "at most " + std::to_string(c.remaining() / 32) + holds,
           std::to_string(h.num_tensors), 8);
  }
  if (h.num_kv > c.remaining() / 13) {
    c.fail("metadata_kv_count", "at most " + std::to_string(c.remaining() / 13) + holds,
           std::to_string(h.num_kv), 16);
  }
  return h;
}

// num_kv (key, type, value) entries; each key once.
void read_metadata(Cursor& c, std::uint64_t num_kv, std::map<std::string, GgufValue>& metadata) {
  for (std::uint64_t i = 0; i < num_kv; ++i) {
    const std::string where = "metadata[" + std::to_string(i) + "]";
    std::string key = c.read_string(where + " key");
    const std::uint64_t at = c.offset();
    const auto type = c.read<std::uint32_t>(key + " type");
    if (!is_known_type(type)) {
      c.fail(key + " type", "a GGUF value type in [0, 12]", std::to_string(type), at);
    }
    GgufValue v = read_value(c, static_cast<GgufType>(type), key, 0);
    if (!metadata.emplace(key, std::move(v)).second) {
      c.fail(where + " key", "a key not seen before", quote(key), at);
    }
  }
}

// A tensor's n_dims and ne[] (read at dims_at) into dims; returns the number of elements.
std::int64_t read_dims(Cursor& c, const std::string& where, std::uint64_t dims_at,
                       std::size_t file_bytes, std::vector<std::int64_t>& dims) {
  const auto n_dims = c.read<std::uint32_t>(where + " n_dims");
  if (n_dims == 0 || n_dims > kMaxDims) {
    c.fail(where + " n_dims", "1 to " + std::to_string(kMaxDims), std::to_string(n_dims), dims_at);
  }
  std::int64_t elements = 1;
  for (std::uint32_t d = 0; d < n_dims; ++d) {
    const std::uint64_t at = c.offset();
    const auto ne = c.read<std::uint64_t>(where + " ne[" + std::to_string(d) + "]");
    // Bound every dimension and the product by the file size: no ggml type stores an element
    // in less than a bit (the 1-bit types take 1.5 to 1.7). Divided, not multiplied: both
    // factors may reach 2^35 in a 4 GiB file. The exact byte range is checked below.
    const std::uint64_t max_elements = file_bytes * 8;
    if (ne == 0 || ne > max_elements || static_cast<std::uint64_t>(elements) > max_elements / ne) {
      c.fail(
          where + " ne[" + std::to_string(d) + "]",
          "a positive size whose product fits the file (" + std::to_string(file_bytes) + " bytes)",
          std::to_string(ne), at);
    }
    elements *= static_cast<std::int64_t>(ne);
    dims.push_back(static_cast<std::int64_t>(ne));
  }
  return elements;
}

// num_tensors tensor infos (name, dims, ggml type, offset relative to the data section), each
// name once; tensors and index get them in file order.
void read_tensor_infos(Cursor& c, std::uint64_t num_tensors, std::size_t file_bytes,
                       std::uint32_t alignment, std::vector<GgufTensorInfo>& tensors,
                       std::map<std::string, std::size_t>& index) {
  tensors.reserve(num_tensors);
  for (std::uint64_t i = 0; i < num_tensors; ++i) {
    GgufTensorInfo t;
    t.name = c.read_string("tensor[" + std::to_string(i) + "] name");
    const std::string where = "tensor " + quote(t.name);
    const std::uint64_t dims_at = c.offset();
    const std::int64_t elements = read_dims(c, where, dims_at, file_bytes, t.dims);
    const std::uint64_t type_at = c.offset();
    t.type = c.read<std::uint32_t>(where + " type");
    const auto traits = ggml_type_traits(t.type);
    if (!traits) c.fail(where + " type", "a ggml tensor type id", std::to_string(t.type), type_at);
    if (t.dims[0] % traits->block_elems != 0) {
      c.fail(where + " ne[0]",
             "a multiple of " + std::to_string(traits->block_elems) + " (the " + traits->name +
                 " block size)",
             std::to_string(t.dims[0]), dims_at + 4);
    }
    t.num_bytes =
        static_cast<std::uint64_t>(ggml_row_bytes(t.type, t.dims[0]) * (elements / t.dims[0]));
    const std::uint64_t off_at = c.offset();
    t.offset = c.read<std::uint64_t>(where + " offset");
    if (t.offset % alignment != 0) {
      c.fail(where + " offset", "a multiple of the alignment " + std::to_string(alignment),
             std::to_string(t.offset), off_at);
    }
    if (!index.emplace(t.name, tensors.size()).second) {
      c.fail(where + " name", "a tensor name not seen before", quote(t.name), dims_at);
    }
    tensors.push_back(std::move(t));
  }
}

// Checks that each tensor's bytes lie inside the data section (which starts at data_offset) and
// makes its offset absolute.
void place_tensor_data(const std::string& path, std::uint64_t header_end, std::uint64_t data_offset,
                       std::size_t file_bytes, std::vector<GgufTensorInfo>& tensors) {
  if (!tensors.empty() && data_offset > file_bytes) {
    fail_expected(path + ": byte " + std::to_string(header_end) + ": data section",
                  "the tensor data after the header", "end of file (truncated?)");
  }
  const std::uint64_t data_bytes = tensors.empty() ? 0 : file_bytes - data_offset;
  for (GgufTensorInfo& t : tensors) {
    if (t.offset > data_bytes || t.num_bytes > data_bytes - t.offset) {
      fail_expected(path + ": tensor " + quote(t.name) + " data",
                    "bytes [" + std::to_string(t.offset) + ", " +
                        std::to_string(t.offset + t.num_bytes) + ") inside the data section of " +
                        std::to_string(data_bytes) + " bytes",
                    "a range past the end of the file (truncated?)");
    }
    t.offset += data_offset;
  }
}

// No two tensors may share bytes.
void check_no_overlap(const std::string& path, const std::vector<GgufTensorInfo>& tensors) {
  std::vector<const GgufTensorInfo*> by_offset;
  for (const GgufTensorInfo& t : tensors) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(),
            [](const auto* a, const auto* b) { return a->offset < b->offset; });
  for (std::size_t i = 1; i < by_offset.size(); ++i) {
    const GgufTensorInfo& a = *by_offset[i - 1];
    const GgufTensorInfo& b = *by_offset[i];
    if (a.offset + a.num_bytes > b.offset) {
      fail_expected(path + ": tensor " + quote(b.name) + " offset",
                    "data that does not overlap tensor " + quote(a.name) + " (ends at byte " +
                        std::to_string(a.offset + a.num_bytes) + ")",
                    "byte " + std::to_string(b.offset));
    }
  }
}

}  // namespace

const char* gguf_type_name(GgufType t) {
  switch (t) {
    case GgufType::kUint8:
      return "uint8";
    case GgufType::kInt8:
      return "int8";
    case GgufType::kUint16:
      return "uint16";
    case GgufType::kInt16:
      return "int16";
    case GgufType::kUint32:
      return "uint32";
    case GgufType::kInt32:
      return "int32";
    case GgufType::kFloat32:
      return "float32";
    case GgufType::kBool:
      return "bool";
    case GgufType::kString:
      return "string";
    case GgufType::kArray:
      return "array";
    case GgufType::kUint64:
      return "uint64";
    case GgufType::kInt64:
      return "int64";
    case GgufType::kFloat64:
      return "float64";
  }
  return "unknown";
}

bool GgufValue::is_integer() const {
  return std::holds_alternative<std::uint64_t>(data) || std::holds_alternative<std::int64_t>(data);
}

const std::vector<GgufValue>& GgufValue::items() const {
  return std::get<std::vector<GgufValue>>(data);
}

std::string GgufValue::describe() const {
  if (const auto* u = std::get_if<std::uint64_t>(&data)) return std::to_string(*u);
  if (const auto* i = std::get_if<std::int64_t>(&data)) return std::to_string(*i);
  if (const auto* d = std::get_if<double>(&data)) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", *d);
    return buf;
  }
  if (const auto* b = std::get_if<bool>(&data)) return *b ? "true" : "false";
  if (const auto* s = std::get_if<std::string>(&data)) return quote(*s);
  return "[" + std::to_string(items().size()) + " " + gguf_type_name(elem_type) + "]";
}

std::int64_t GgufTensorInfo::num_elements() const {
  std::int64_t n = 1;
  for (std::int64_t d : dims) n *= d;
  return n;
}

GgufFile::GgufFile(const std::string& path)
    : file_(std::make_shared<const MappedFile>(path)), bytes_(file_->bytes()), path_(path) {
  parse();
}

GgufFile::GgufFile(std::span<const std::byte> bytes, std::string name)
    : bytes_(bytes), path_(std::move(name)) {
  parse();
}

void GgufFile::parse() {
  Cursor c(bytes_, path_);
  const Header header = read_header(c, bytes_);
  version_ = header.version;
  read_metadata(c, header.num_kv, metadata_);

  if (const GgufValue* a = find("general.alignment")) {
    const auto* u = std::get_if<std::uint64_t>(&a->data);
    if (a->type != GgufType::kUint32 || *u == 0 || (*u & (*u - 1)) != 0) {
      throw Error(path_, "general.alignment: expected a uint32 power of two, got " +
                             std::string(gguf_type_name(a->type)) + " " + a->describe());
    }
    alignment_ = static_cast<std::uint32_t>(*u);
  }

  read_tensor_infos(c, header.num_tensors, bytes_.size(), alignment_, tensors_, tensor_index_);

  data_offset_ = (c.offset() + alignment_ - 1) / alignment_ * alignment_;
  place_tensor_data(path_, c.offset(), data_offset_, bytes_.size(), tensors_);
  check_no_overlap(path_, tensors_);
}

const GgufValue* GgufFile::find(const std::string& key) const {
  auto it = metadata_.find(key);
  return it == metadata_.end() ? nullptr : &it->second;
}

namespace {
[[noreturn]] void wrong_type(const std::string& path, const std::string& key,
                             const std::string& expected, const GgufValue& v) {
  fail_expected(path + ": " + key, expected,
                std::string(gguf_type_name(v.type)) + " " + v.describe());
}
}  // namespace

std::optional<std::uint64_t> GgufFile::get_uint(const std::string& key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return std::nullopt;
  if (const auto* u = std::get_if<std::uint64_t>(&v->data)) return *u;
  if (const auto* i = std::get_if<std::int64_t>(&v->data); i != nullptr && *i >= 0) {
    return static_cast<std::uint64_t>(*i);
  }
  wrong_type(path_, key, "a non-negative integer", *v);
}

std::optional<double> GgufFile::get_float(const std::string& key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return std::nullopt;
  if (const auto* d = std::get_if<double>(&v->data)) return *d;
  wrong_type(path_, key, "a float", *v);
}

std::optional<std::string> GgufFile::get_string(const std::string& key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return std::nullopt;
  if (const auto* s = std::get_if<std::string>(&v->data)) return *s;
  wrong_type(path_, key, "a string", *v);
}

std::optional<bool> GgufFile::get_bool(const std::string& key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return std::nullopt;
  if (const auto* b = std::get_if<bool>(&v->data)) return *b;
  wrong_type(path_, key, "a bool", *v);
}

std::uint64_t GgufFile::require_uint(const std::string& key) const {
  if (auto u = get_uint(key)) return *u;
  throw Error(path_, key + ": expected an integer metadata key, got none (missing)");
}

std::string GgufFile::require_string(const std::string& key) const {
  if (auto s = get_string(key)) return *s;
  throw Error(path_, key + ": expected a string metadata key, got none (missing)");
}

std::vector<std::string> GgufFile::get_string_array(const std::string& key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return {};
  if (!v->is_array() || v->elem_type != GgufType::kString) {
    wrong_type(path_, key, "an array of strings", *v);
  }
  std::vector<std::string> out;
  out.reserve(v->items().size());
  for (const GgufValue& item : v->items()) out.push_back(std::get<std::string>(item.data));
  return out;
}

std::vector<std::int64_t> GgufFile::get_int_array(const std::string& key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return {};
  const bool integers = v->is_array() && v->elem_type != GgufType::kArray &&
                        (v->items().empty() || v->items()[0].is_integer());
  if (!integers) {
    wrong_type(path_, key, "an array of integers", *v);
  }
  std::vector<std::int64_t> out;
  out.reserve(v->items().size());
  for (const GgufValue& item : v->items()) {
    if (const auto* u = std::get_if<std::uint64_t>(&item.data)) {
      out.push_back(static_cast<std::int64_t>(*u));
    } else {
      out.push_back(std::get<std::int64_t>(item.data));
    }
  }
  return out;
}

const GgufTensorInfo* GgufFile::find_tensor(const std::string& name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

std::span<const std::byte> GgufFile::tensor_bytes(const GgufTensorInfo& t) const {
  return bytes_.subspan(t.offset, t.num_bytes);
}

bool is_gguf_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char magic[4] = {};
  return in.read(magic, 4) && std::memcmp(magic, kMagic, 4) == 0;
}

}  // namespace kvscope
