// Runs the project's Python helpers (python/cli_scripts/*.py) with the project's .venv interpreter, for
// baselines that only exist in Python (compiled flex_attention).
#pragma once
#include <string>
#include <vector>

namespace dflash::util {

struct PythonResult {
  int exit_code = -1;
  std::string stdout_text;
};

// The interpreter: $DFLASH_PYTHON, else the .venv of the source tree this binary was built from.
std::string project_python();
// Path of python/cli_scripts/<script> in the source tree.
std::string project_script(const std::string& script);
// Runs `python script args...`; stderr passes through to ours so progress stays visible.
PythonResult run_python(const std::string& script, const std::vector<std::string>& args);

}  // namespace dflash::util
