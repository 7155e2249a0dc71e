// ZeroedBuffer: anonymous private mapping, huge pages requested for large buffers (the heap
// under AddressSanitizer).
#include "engine/common/zeroed_buffer.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <new>
#include <string>
#include <utility>
#include <vector>

namespace kvscope {

namespace {
constexpr std::size_t kHugePage = std::size_t{2} << 20;
// Under AddressSanitizer the buffer comes from the (instrumented) heap, exactly `bytes` long, so
// an access one byte past it is reported; a private mapping would hide such bugs.
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kFromHeap = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kFromHeap = true;
#else
constexpr bool kFromHeap = false;
#endif
#else
constexpr bool kFromHeap = false;
#endif
}  // namespace

ZeroedBuffer::ZeroedBuffer(std::size_t bytes) : size_(bytes) {
  if (bytes == 0) return;
  if constexpr (kFromHeap) {
    data_ = static_cast<std::byte*>(std::calloc(bytes, 1));
    if (data_ == nullptr) throw std::bad_alloc();
    return;
  }
  // Round the mapping up to whole huge pages so the last one can be huge too (the tail is unused).
  const std::size_t mapped =
      bytes >= kHugePage ? (bytes + kHugePage - 1) / kHugePage * kHugePage : bytes;
  void* p = ::mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  // A hint: the kernel may refuse (THP off); the buffer works either way.
  if (mapped >= kHugePage) (void)::madvise(p, mapped, MADV_HUGEPAGE);
  data_ = static_cast<std::byte*>(p);
  size_ = mapped;
}

long ZeroedBuffer::huge_page_bytes() const {
  if (data_ == nullptr) return 0;
  std::ifstream smaps("/proc/self/smaps");
  if (!smaps) return -1;
  const auto start = reinterpret_cast<std::uintptr_t>(data_);
  std::string line;
  bool inside = false;
  while (std::getline(smaps, line)) {
    // A mapping's header line starts with "lo-hi perms offset dev inode": its first ':' (in dev)
    // comes after a space; field lines ("AnonHugePages:   2048 kB") have it before any space.
    const std::size_t dash = line.find('-');
    if (dash != std::string::npos && line.find(':') > line.find(' ')) {
      inside = std::strtoull(line.substr(0, dash).c_str(), nullptr, 16) == start;
      continue;
    }
    if (inside && line.rfind("AnonHugePages:", 0) == 0)
      return std::strtol(line.c_str() + 14, nullptr, 10) * 1024;
  }
  return -1;
}

long ZeroedBuffer::resident_bytes() const {
  if (data_ == nullptr) return 0;
  const long page = ::sysconf(_SC_PAGESIZE);
  if (page <= 0) return -1;
  const auto upage = static_cast<std::uintptr_t>(page);
  // mincore wants a page-aligned start; heap buffers (AddressSanitizer) may not begin on one.
  const std::uintptr_t lo = reinterpret_cast<std::uintptr_t>(data_) / upage * upage;
  const std::uintptr_t hi = reinterpret_cast<std::uintptr_t>(data_) + size_;
  std::vector<unsigned char> vec((hi - lo + upage - 1) / upage);
  if (::mincore(reinterpret_cast<void*>(lo), hi - lo, vec.data()) != 0) return -1;
  long pages = 0;
  for (unsigned char v : vec) pages += v & 1;
  return pages * page;
}

ZeroedBuffer::~ZeroedBuffer() {
  release();
}

ZeroedBuffer::ZeroedBuffer(ZeroedBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

ZeroedBuffer& ZeroedBuffer::operator=(ZeroedBuffer&& other) noexcept {
  if (this != &other) {
    release();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

void ZeroedBuffer::release() {
  if (data_ != nullptr) {
    if constexpr (kFromHeap)
      std::free(data_);
    else
      ::munmap(data_, size_);
  }
  data_ = nullptr;
  size_ = 0;
}

}  // namespace kvscope
