// GGUF (v2/v3) reader: header, metadata key/values of every type, tensor infos and the aligned
// data section, mmapped and validated; every malformation is a one-line kvscope::Error naming the
// file, the byte offset, the field, the value and what was expected.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "engine/common/mapped_file.h"

namespace kvscope {

// GGUF metadata value types, as stored.
enum class GgufType : std::uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};
const char* gguf_type_name(GgufType t);

// One metadata value. Integers keep their sign class (unsigned / signed), floats widen to double;
// an array holds its element type and its items (arrays may nest).
struct GgufValue {
  GgufType type = GgufType::kUint8;
  GgufType elem_type = GgufType::kUint8;  // arrays only
  std::variant<std::uint64_t, std::int64_t, double, bool, std::string, std::vector<GgufValue>> data;

  bool is_integer() const;
  bool is_array() const { return type == GgufType::kArray; }
  const std::vector<GgufValue>& items() const;
  // One line for `kvscope info` and errors: 42, "llama", [49152 strings], ...
  std::string describe() const;
};

// One tensor as the file describes it. dims are ggml's ne: dims[0] is the contiguous one, so a
// matrix [out][in] row-major has dims {in, out}.
struct GgufTensorInfo {
  std::string name;
  std::vector<std::int64_t> dims;  // ne[0..n_dims)
  std::uint32_t type = 0;          // ggml type id (engine/model/ggml_types.h)
  std::uint64_t offset = 0;        // from the start of the file (data section start + relative)
  std::uint64_t num_bytes = 0;
  std::int64_t num_elements() const;
};

class GgufFile {
 public:
  // Maps and validates `path`. Throws kvscope::Error on anything malformed.
  explicit GgufFile(const std::string& path);
  // Parses bytes the caller keeps alive (tests, the fuzzer); `name` stands for the file in errors.
  GgufFile(std::span<const std::byte> bytes, std::string name);

  const std::string& path() const { return path_; }
  std::uint32_t version() const { return version_; }
  std::uint32_t alignment() const { return alignment_; }
  std::uint64_t data_offset() const { return data_offset_; }
  std::size_t size() const { return bytes_.size(); }
  const std::map<std::string, GgufValue>& metadata() const { return metadata_; }
  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }

  // Metadata lookups; the typed getters throw a one-line Error naming the key when it exists with
  // another type or is out of range, and (require_*) when it is missing.
  const GgufValue* find(const std::string& key) const;
  std::optional<std::uint64_t> get_uint(const std::string& key) const;
  std::optional<double> get_float(const std::string& key) const;
  std::optional<std::string> get_string(const std::string& key) const;
  std::optional<bool> get_bool(const std::string& key) const;
  std::uint64_t require_uint(const std::string& key) const;
  std::string require_string(const std::string& key) const;
  // An array of strings (tokens, merges) / of integers (token types); throws when of other items.
  std::vector<std::string> get_string_array(const std::string& key) const;
  std::vector<std::int64_t> get_int_array(const std::string& key) const;

  const GgufTensorInfo* find_tensor(const std::string& name) const;
  // The tensor's bytes inside the mapping.
  std::span<const std::byte> tensor_bytes(const GgufTensorInfo& t) const;
  // The file's mapping (null when parsed from the caller's bytes): whoever keeps pointers into
  // tensor_bytes past this object's life keeps it too.
  const std::shared_ptr<const MappedFile>& mapping() const { return file_; }

 private:
  void parse();
  std::shared_ptr<const MappedFile> file_;  // set when constructed from a path
  std::span<const std::byte> bytes_;        // the whole file
  std::string path_;
  std::uint32_t version_ = 0;
  std::uint32_t alignment_ = 32;
  std::uint64_t data_offset_ = 0;
  std::map<std::string, GgufValue> metadata_;
  std::vector<GgufTensorInfo> tensors_;
  std::map<std::string, std::size_t> tensor_index_;  // name -> index in tensors_
};

// Whether the file at `path` starts with the GGUF magic (false for unreadable or short files).
bool is_gguf_file(const std::string& path);

}  // namespace kvscope
