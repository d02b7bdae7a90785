#include "test_support.h"

#include <fstream>
#include <sstream>
#include <stdexcept>

namespace fathom::chat::testing {

std::string shared_data_dir() { return FATHOM_SHARED_DATA_DIR; }
std::string chat_test_data_dir() { return std::string(FATHOM_SOURCE_DIR) + "/tests/chat/data"; }
std::string source_dir() { return FATHOM_SOURCE_DIR; }

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path);
  std::ostringstream contents;
  contents << in.rdbuf();
  return contents.str();
}

nlohmann::ordered_json read_json(const std::string& path) { return nlohmann::ordered_json::parse(read_file(path)); }

}  // namespace fathom::chat::testing
