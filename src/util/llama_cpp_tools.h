// Where llama.cpp's tools are: scripts/setup_llama_cpp.sh builds them from the pinned llama-cpp-python sdist into
// $DFLASH_LLAMA_CPP_DIR, by default ${XDG_CACHE_HOME:-~/.cache}/dflash/llama.cpp-<version> (docs/SERVING.md).
// `dflash export --gguf` runs its converter, `dflash eval --engine llama.cpp` its speculative decoding.
#pragma once
#include <string>
#include <vector>

namespace dflash::util {

// The llama-cpp-python version the set-up builds (scripts/setup_llama_cpp.sh VERSION; a test keeps them equal).
inline constexpr const char* kLlamaCppVersion = "0.3.36";

std::string llama_cpp_dir();
// build/bin/<name> of that folder. A missing program: std::runtime_error "<what>: llama.cpp's <name> is missing
// (<path>): run scripts/setup.sh (or make build) to build it, or set DFLASH_LLAMA_CPP_DIR to a build of it".
std::string llama_cpp_program(const std::string& name, const std::string& what);
// src/convert_hf_to_gguf.py of that folder, or the same error.
std::string llama_cpp_converter(const std::string& what);

struct ProcessResult {
  int exit_code = -1;  // 128 + N when killed by signal N
  std::string out, err;
};
// Runs argv[0] (a path) with its arguments, no shell, capturing stdout and stderr apart.
ProcessResult run_process(const std::vector<std::string>& argv);
// The last non-empty line of `text` ("" when none).
std::string last_line(const std::string& text);

}  // namespace dflash::util
