#include "core/error.h"

#include <cstring>

namespace fathom {

void throw_error(const char* source_file, int source_line, const std::string& message) {
  // Keep only the path below src/ so messages stay short and stable across build trees.
  const char* short_path = std::strstr(source_file, "src/");
  std::ostringstream os;
  os << message << " [" << (short_path ? short_path : source_file) << ":" << source_line << "]";
  throw Error(os.str());
}

}  // namespace fathom
