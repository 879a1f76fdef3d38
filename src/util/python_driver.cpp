#include "python_driver.h"

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <cstdlib>

namespace dflash::util {
namespace {

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

}  // namespace

std::string project_python() {
  if (const char* p = std::getenv("DFLASH_PYTHON")) return p;
  return std::string(DFLASH_SOURCE_DIR) + "/.venv/bin/python";
}

std::string project_script(const std::string& script) {
  return std::string(DFLASH_SOURCE_DIR) + "/python/cli_scripts/" + script;
}

PythonResult run_python(const std::string& script, const std::vector<std::string>& args) {
  std::string cmd = shell_quote(project_python()) + " " + shell_quote(project_script(script));
  // (Appended piecewise: GCC 12 warns, a false positive of -Wrestrict, on `" " + std::string` inlined here.)
  for (const auto& a : args) (cmd += " ") += shell_quote(a);
  PythonResult r;
  FILE* pipe = popen(cmd.c_str(), "r");
  if (!pipe) return r;
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), pipe)) > 0) r.stdout_text.append(buf.data(), n);
  const int status = pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

}  // namespace dflash::util
