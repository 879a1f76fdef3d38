// Test helper: the message of the exception of type E that `f` throws, or "" when it throws none. Tests match
// on this text because it is what a user reads (the file, the field, the expected value).
#pragma once

#include <exception>
#include <string>

template <typename E = std::exception, typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  return "";
}
