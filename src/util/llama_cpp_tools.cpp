#include "llama_cpp_tools.h"

#include <poll.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

extern char** environ;

namespace dflash::util {

namespace {

bool is_file(const std::string& p) {
  struct stat st{};
  return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::string require_file(const std::string& path, const std::string& name, const std::string& what) {
  if (!is_file(path))
    throw std::runtime_error(what + ": llama.cpp's " + name + " is missing (" + path +
                             "): run scripts/setup.sh (or make build) to build it, or set DFLASH_LLAMA_CPP_DIR to "
                             "a build of it");
  return path;
}

}  // namespace

std::string llama_cpp_dir() {
  if (const char* d = std::getenv("DFLASH_LLAMA_CPP_DIR"); d && *d) return d;
  std::string cache;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x)
    cache = x;
  else if (const char* h = std::getenv("HOME"); h && *h)
    cache = std::string(h) + "/.cache";
  else
    cache = ".cache";
  return cache + "/dflash/llama.cpp-" + kLlamaCppVersion;
}

std::string llama_cpp_program(const std::string& name, const std::string& what) {
  return require_file(llama_cpp_dir() + "/build/bin/" + name, name, what);
}

std::string llama_cpp_converter(const std::string& what) {
  return require_file(llama_cpp_dir() + "/src/convert_hf_to_gguf.py", "converter convert_hf_to_gguf.py", what);
}

ProcessResult run_process(const std::vector<std::string>& argv) {
  ProcessResult r;
  int out_pipe[2], err_pipe[2];
  if (::pipe(out_pipe) != 0) throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
  if (::pipe(err_pipe) != 0) {
    ::close(out_pipe[0]);
    ::close(out_pipe[1]);
    throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, out_pipe[1], 1);
  posix_spawn_file_actions_adddup2(&fa, err_pipe[1], 2);
  posix_spawn_file_actions_addclose(&fa, out_pipe[0]);
  posix_spawn_file_actions_addclose(&fa, err_pipe[0]);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  const int rc = ::posix_spawn(&pid, argv.at(0).c_str(), &fa, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  ::close(out_pipe[1]);
  ::close(err_pipe[1]);
  if (rc != 0) {
    ::close(out_pipe[0]);
    ::close(err_pipe[0]);
    throw std::runtime_error("cannot run " + argv[0] + ": " + std::strerror(rc));
  }
  // Both pipes drained together: a child that fills one while we block on the other would never finish.
  pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  std::string* sinks[2] = {&r.out, &r.err};
  int open_fds = 2;
  char buf[65536];
  while (open_fds > 0) {
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      const ssize_t n = ::read(fds[i].fd, buf, sizeof buf);
      if (n > 0) {
        sinks[i]->append(buf, static_cast<size_t>(n));
      } else if (n == 0 || errno != EINTR) {
        ::close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
      }
    }
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : WIFSIGNALED(status) ? 128 + WTERMSIG(status) : -1;
  return r;
}

std::string last_line(const std::string& text) {
  size_t end = text.size();
  while (end > 0) {
    while (end > 0 && (text[end - 1] == '\n' || text[end - 1] == '\r' || text[end - 1] == ' ')) --end;
    if (end == 0) break;
    const size_t begin = text.rfind('\n', end - 1);
    const size_t b = begin == std::string::npos ? 0 : begin + 1;
    return text.substr(b, end - b);
  }
  return "";
}

}  // namespace dflash::util
