// Shared by the fuzz targets. An input may be refused, but only the way the CLI refuses it: a std::exception whose
// message names the input. A crash, a sanitizer report, a leak, another exception type, or an error that does not
// say which file it is about stops the fuzzer with an artifact to reproduce it.
#pragma once
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>

namespace dflash::fuzz {

template <typename F>
void expect_clean(const char* name, F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    if (!std::strstr(e.what(), name)) {
      std::fprintf(stderr, "error message without the input's name '%s': %s\n", name, e.what());
      std::abort();
    }
  }
}

[[noreturn]] inline void violated(const std::string& what) {
  std::fprintf(stderr, "property violated: %s\n", what.c_str());
  std::abort();
}

}  // namespace dflash::fuzz
