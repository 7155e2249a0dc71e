// Read-only memory mapping of a whole file (zero copy), with clear errors for the usual mistakes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace kvscope {

class MappedFile {
 public:
  MappedFile() = default;
  // Throws kvscope::Error naming the path when it is missing, a directory, empty or unreadable.
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::string& path() const { return path_; }
  std::span<const std::byte> bytes() const { return {data_, size_}; }
  std::size_t size() const { return size_; }

 private:
  void release();
  std::string path_;
  const std::byte* data_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace kvscope
