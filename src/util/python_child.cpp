#include "python_child.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "python_driver.h"

extern char** environ;

namespace dflash::util {

PythonChild::PythonChild(const std::string& script, const std::vector<std::string>& args) {
  // A socket, not a pipe: send(MSG_NOSIGNAL) to a helper that already exited is an error, not a SIGPIPE.
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
    error_ = std::string("socketpair: ") + std::strerror(errno);
    return;
  }
  std::vector<std::string> argv_s = {project_python(), project_script(script)};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, sv[1], STDIN_FILENO);  // dup2 clears CLOEXEC on the child's stdin
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 34))
  // Nothing of ours beyond stdin/stdout/stderr (data files, Gloo sockets) stays open in the helper.
  posix_spawn_file_actions_addclosefrom_np(&actions, 3);
#endif
  pid_t pid = -1;
  const int rc = ::posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(sv[1]);
  if (rc != 0) {
    ::close(sv[0]);
    error_ = argv_s[0] + ": " + std::strerror(rc);
    return;
  }
  pid_ = pid;
  fd_ = sv[0];
}

PythonChild::~PythonChild() {
  if (fd_ >= 0) ::close(fd_);
  // A helper still running is not waited for; it exits on its own once it sees the lifeline closed (init reaps it).
}

int PythonChild::finish(const std::string& word, double wait_seconds) {
  if (fd_ >= 0) {
    const std::string line = word + "\n";
    if (!word.empty()) (void)::send(fd_, line.data(), line.size(), MSG_NOSIGNAL);
    ::close(fd_);
    fd_ = -1;
  }
  if (pid_ <= 0) return -1;
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(wait_seconds);
  while (true) {
    int status = 0;
    const pid_t r = ::waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      pid_ = -1;
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
    }
    if (r < 0 && errno != EINTR) return -1;
    if (std::chrono::steady_clock::now() >= until) return -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

}  // namespace dflash::util
