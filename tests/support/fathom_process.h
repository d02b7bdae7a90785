#pragma once
// Runs the `fathom` binary from tests: one-shot commands (output and exit code) and a long-running `fathom serve`.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <regex>
#include <stdexcept>
#include <string>
#include <vector>

namespace fathom::testing {

using namespace std::chrono_literals;

struct RunResult {
  int exit_code;
  std::string output;
};

// `fathom <arguments>` through the shell; stdout and stderr together.
inline RunResult run(const std::string& arguments) {
  FILE* pipe = popen((std::string(FATHOM_BINARY) + " " + arguments + " 2>&1").c_str(), "r");
  std::string output;
  std::array<char, 4096> buffer;
  while (size_t n = fread(buffer.data(), 1, buffer.size(), pipe)) output.append(buffer.data(), n);
  int status = pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, output};
}

// A running `fathom serve` child with its combined output on a pipe.
class ServeProcess {
 public:
  explicit ServeProcess(const std::vector<std::string>& arguments) {
    int fds[2];
    if (pipe(fds) != 0) throw std::runtime_error("pipe");
    pid_ = fork();
    if (pid_ == 0) {
      dup2(fds[1], 1);
      dup2(fds[1], 2);
      close(fds[0]);
      std::vector<char*> argv;
      std::string binary = FATHOM_BINARY;
      argv.push_back(binary.data());
      std::vector<std::string> copies = arguments;
      for (std::string& argument : copies) argv.push_back(argument.data());
      argv.push_back(nullptr);
      execv(binary.c_str(), argv.data());
      _exit(127);
    }
    close(fds[1]);
    output_fd_ = fds[0];
  }
  ~ServeProcess() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    close(output_fd_);
  }
  // Reads output until `pattern` matches; returns the first capture group.
  std::string wait_for(const std::regex& pattern) {
    const auto deadline = std::chrono::steady_clock::now() + 120s;
    std::smatch match;
    while (!std::regex_search(output_, match, pattern)) {
      if (std::chrono::steady_clock::now() > deadline) throw std::runtime_error("timed out; output:\n" + output_);
      char buffer[4096];
      ssize_t n = read(output_fd_, buffer, sizeof(buffer));
      if (n <= 0) throw std::runtime_error("fathom serve exited early; output:\n" + output_);
      output_.append(buffer, static_cast<size_t>(n));
    }
    return match.size() > 1 ? match[1].str() : match[0].str();
  }
  int terminate_and_wait() {
    kill(pid_, SIGTERM);
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
    char buffer[4096];
    ssize_t n;
    while ((n = read(output_fd_, buffer, sizeof(buffer))) > 0) output_.append(buffer, static_cast<size_t>(n));
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  const std::string& output() const { return output_; }

 private:
  pid_t pid_ = -1;
  int output_fd_ = -1;
  std::string output_;
};

}  // namespace fathom::testing
