#pragma once
// A temporary file that a Logger writes to in the tests, read back as lines.
#include <fcntl.h>

#include <cstdio>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace fathom::testing {

class LogCapture {
 public:
  LogCapture() : file_(std::tmpfile()) {
    if (file_ == nullptr) throw std::runtime_error("LogCapture: no temporary file");
    // Appending: lines() moves the shared file offset, which a writer's next line must not follow.
    const int fd = fileno(file_);
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_APPEND);
  }
  ~LogCapture() { std::fclose(file_); }
  LogCapture(const LogCapture&) = delete;
  LogCapture& operator=(const LogCapture&) = delete;

  std::FILE* file() const { return file_; }
  // Every complete line written so far, without newlines.
  std::vector<std::string> lines() const {
    std::fflush(file_);
    std::rewind(file_);
    std::string text;
    char buffer[4096];
    for (size_t n; (n = std::fread(buffer, 1, sizeof(buffer), file_)) > 0;) text.append(buffer, n);
    std::vector<std::string> result;
    std::stringstream stream(text);
    for (std::string line; std::getline(stream, line);) result.push_back(line);
    return result;
  }

 private:
  std::FILE* file_;
};

}  // namespace fathom::testing
