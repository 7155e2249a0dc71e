// ZeroedBuffer: a large zero-filled byte buffer straight from the kernel (anonymous mmap): pages
// are zero without a memset and are touched only when used, and buffers of 2 MiB or more ask for
// transparent huge pages, so streaming over the KV pool (attention reads every cached token of
// a sequence per layer) takes far fewer TLB misses than on 4 KiB pages.
#pragma once

#include <cstddef>

namespace kvscope {

class ZeroedBuffer {
 public:
  ZeroedBuffer() = default;
  explicit ZeroedBuffer(std::size_t bytes);  // throws std::bad_alloc when the kernel refuses
  ~ZeroedBuffer();
  ZeroedBuffer(ZeroedBuffer&& other) noexcept;
  ZeroedBuffer& operator=(ZeroedBuffer&& other) noexcept;
  ZeroedBuffer(const ZeroedBuffer&) = delete;
  ZeroedBuffer& operator=(const ZeroedBuffer&) = delete;

  std::byte* data() const { return data_; }
  std::size_t size() const { return size_; }
  // Bytes of the buffer the kernel currently backs with huge pages (from /proc/self/smaps;
  // -1 when that cannot be read).
  long huge_page_bytes() const;
  // Bytes of the buffer's pages the kernel currently backs with memory (mincore over the whole
  // mapping, in whole pages; -1 when that cannot be asked). Untouched pages of a mapping are not
  // backed; under AddressSanitizer the buffer is heap memory, which calloc may have touched.
  long resident_bytes() const;

 private:
  void release();
  std::byte* data_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace kvscope
