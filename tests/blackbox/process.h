// Runs a child process with captured output, for black-box tests.
#pragma once

#include <sys/types.h>

#include <cstdlib>
#include <string>
#include <vector>

namespace tokenscope::testing {

// The binary under test: the build's, or the one TOKENSCOPE_BIN in the
// environment names (scripts/gpu-check runs the probe tests on a GPU machine
// where the build's path is not this one).
inline const std::string kBin =
    std::getenv("TOKENSCOPE_BIN") ? std::getenv("TOKENSCOPE_BIN") : TOKENSCOPE_BINARY;

// Under a sanitizer: the RSS bounds are those of glibc's allocator, while a
// sanitizer's allocator keeps freed memory in quarantine and adds its own.
#if defined(TOKENSCOPE_SANITIZED)
inline constexpr bool kSanitized = true;
#else
inline constexpr bool kSanitized = false;
#endif

struct ProcessResult {
  int exit_code = -1;   // -1 when killed by a signal
  int term_signal = 0;  // the signal that ended it, if any
  std::string out;
  std::string err;
  long max_rss_kb = -1;  // run_process: the child's peak resident set (wait4's ru_maxrss)
};

// A loopback port nothing listens on now: one the kernel handed out to a
// socket bound here and closed again.
int unused_loopback_port();

// Runs argv to completion (killed after timeout_s), capturing stdout and stderr.
ProcessResult run_process(const std::vector<std::string>& argv, double timeout_s = 120.0);

// A running child whose output goes to files.
class Child {
 public:
  Child(const std::vector<std::string>& argv, const std::string& out_file, const std::string& err_file);
  ~Child();
  void signal(int sig);
  pid_t pid() const { return pid_; }
  // Whether the child is still running (reaps it, without blocking, when it has ended).
  bool running();
  // Waits (at most timeout_s; then kills) and returns the exit status.
  ProcessResult wait(double timeout_s);

 private:
  pid_t pid_ = -1;
  bool reaped_ = false;
  int status_ = 0;
  std::string out_file_, err_file_;
};

}  // namespace tokenscope::testing
