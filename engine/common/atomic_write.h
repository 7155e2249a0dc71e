// Writes a file under a temporary name and renames it into place, so an interrupted run never
// leaves a half-written file behind.
#pragma once

#include <functional>
#include <ostream>
#include <string>

namespace kvscope {

// Calls write(stream) on a temporary file beside `path`, then renames it to `path`.
// Throws kvscope::Error (naming `path`) if the file cannot be written; the target is untouched.
void write_file_atomically(const std::string& path,
                           const std::function<void(std::ostream&)>& write);

}  // namespace kvscope
