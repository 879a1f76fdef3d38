// A Python helper (python/cli_scripts/*.py) run beside this process rather than waited for: its standard input is
// a lifeline socket. Closing it (finish(), our exit, or our death by kill -9) tells the helper we are gone; nothing
// we do waits on the helper until finish(), so a slow or failing helper never holds up the caller. Torch-free.
#pragma once
#include <sys/types.h>

#include <string>
#include <vector>

namespace dflash::util {

class PythonChild {
 public:
  // Starts `project_python() project_script(script) args...` in the background; on failure started() is false
  // and error() says why (the caller goes on without it).
  PythonChild(const std::string& script, const std::vector<std::string>& args);
  ~PythonChild();  // finish("", 0) if still running: the lifeline closes, nothing is waited for
  PythonChild(const PythonChild&) = delete;
  PythonChild& operator=(const PythonChild&) = delete;

  bool started() const { return pid_ > 0; }
  const std::string& error() const { return error_; }
  // Sends `word` + "\n" over the lifeline (a word the helper reads as how we ended), closes it and waits up to
  // `wait_seconds` for the helper to exit. Returns its exit status, or -1 when it was still running (left to
  // finish on its own) or could not be waited for.
  int finish(const std::string& word, double wait_seconds);

 private:
  pid_t pid_ = -1;
  int fd_ = -1;
  std::string error_;
};

}  // namespace dflash::util
