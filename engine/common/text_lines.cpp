// read_text_file.
#include "engine/common/text_lines.h"

#include <fstream>
#include <sstream>

#include "engine/common/error.h"

namespace kvscope {

std::string read_text_file(const std::string& path, const std::string& cannot_open_message) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path, cannot_open_message);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace kvscope
