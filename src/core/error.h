#pragma once
// Errors carry the source location and a message naming the offending object (file, tensor, field, request).
#include <sstream>
#include <stdexcept>
#include <string>

namespace fathom {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

[[noreturn]] void throw_error(const char* source_file, int source_line, const std::string& message);

}  // namespace fathom

// FATHOM_CHECK(cond, "tensor " << name << " has shape " << shape): throws fathom::Error with file:line.
#define FATHOM_CHECK(cond, message_stream)                                 \
  do {                                                                     \
    if (!(cond)) {                                                         \
      std::ostringstream fathom_check_os_;                                 \
      fathom_check_os_ << message_stream;                                  \
      ::fathom::throw_error(__FILE__, __LINE__, fathom_check_os_.str());   \
    }                                                                      \
  } while (0)

#define FATHOM_FAIL(message_stream) FATHOM_CHECK(false, message_stream)
