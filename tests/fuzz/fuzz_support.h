// Helpers shared by the libFuzzer targets: a per-process scratch file for loaders that take a
// path, and an invariant check that reports and aborts (so libFuzzer records a crash).
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace kvscope::fuzz {

// One temporary file per process, rewritten for every input (in /dev/shm when it exists).
class ScratchFile {
 public:
  explicit ScratchFile(const char* tag) {
    const char* dir = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    path_ = std::string(dir) + "/kvscope_fuzz_" + tag + "_" + std::to_string(getpid());
  }
  ~ScratchFile() { unlink(path_.c_str()); }
  const std::string& path() const { return path_; }
  // Replaces the file's contents with `size` bytes at `data`; returns its path.
  const std::string& write(const std::uint8_t* data, std::size_t size) {
    int fd = open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) {
      std::perror("kvscope fuzz: scratch file");
      std::abort();
    }
    std::size_t done = 0;
    while (done < size) {
      ssize_t n = ::write(fd, data + done, size - done);
      if (n <= 0) {
        std::perror("kvscope fuzz: scratch write");
        std::abort();
      }
      done += static_cast<std::size_t>(n);
    }
    close(fd);
    return path_;
  }

 private:
  std::string path_;
};

// A broken invariant of a loader's result: print it and abort.
inline void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "kvscope fuzz: invariant broken: %s\n", what);
    std::abort();
  }
}

}  // namespace kvscope::fuzz
