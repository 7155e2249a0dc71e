// MappedFile: mmap a file read-only; every failure is a one-line kvscope::Error naming the file.
#include "engine/common/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "engine/common/error.h"

namespace kvscope {

MappedFile::MappedFile(const std::string& path) : path_(path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    throw Error(path, std::string("cannot open: ") + std::strerror(errno));
  }
  if (S_ISDIR(st.st_mode)) throw Error(path, "expected a file, got a directory");
  if (!S_ISREG(st.st_mode)) throw Error(path, "expected a regular file");
  if (st.st_size == 0) throw Error(path, "expected a non-empty file, got 0 bytes");
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error(path, std::string("cannot open: ") + std::strerror(errno));
  void* p = ::mmap(nullptr, static_cast<std::size_t>(st.st_size), PROT_READ, MAP_PRIVATE, fd, 0);
  int map_errno = errno;
  ::close(fd);
  if (p == MAP_FAILED) throw Error(path, std::string("cannot mmap: ") + std::strerror(map_errno));
  // A hint, still zero copy: pages read into the page cache through this mapping come in 2 MiB
  // folios where the filesystem supports them, and are then mapped as huge pages, so streaming
  // the weights of a large model takes far fewer TLB misses. Pages already cached keep their
  // size (see `--weights copy`, docs/performance.md "Speed (CPU decode)").
  if (st.st_size >= (2 << 20))
    (void)::madvise(p, static_cast<std::size_t>(st.st_size), MADV_HUGEPAGE);
  data_ = static_cast<const std::byte*>(p);
  size_ = static_cast<std::size_t>(st.st_size);
}

MappedFile::~MappedFile() {
  release();
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : path_(std::move(other.path_)),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    release();
    path_ = std::move(other.path_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

void MappedFile::release() {
  if (data_ != nullptr) ::munmap(const_cast<std::byte*>(data_), size_);
  data_ = nullptr;
  size_ = 0;
}

}  // namespace kvscope
