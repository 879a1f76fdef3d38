#!/usr/bin/env bash
# Builds llama.cpp's CPU tools from the pinned PyPI sdist llama-cpp-python (which vendors llama.cpp whole): the
# real serving engine `dflash export --gguf` and `dflash eval --engine llama.cpp` run. Idempotent: a stamp records
# what was built (version, sha256, flags, the CPU's ISA flags), so a second run costs one comparison.
# The build lives outside the checkout (default ~/.cache/dflash/llama.cpp-VERSION) so clones share it.
# Usage: scripts/setup_llama_cpp.sh [PYTHON]   (PYTHON: the venv's python, used for `pip download`)
set -euo pipefail
cd "$(dirname "$0")/.."

VERSION=0.3.36
SHA256=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
PY=${1:-.venv/bin/python}
ROOT=${DFLASH_LLAMA_CPP_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/dflash/llama.cpp-$VERSION}
# Only the programs dflash runs: speculative decoding with a draft GGUF, and the target alone with the same thread
# count (llama-completion -t N; llama-simple has no thread option and runs 4 threads, 10x slower on 2 busy cores).
TARGETS=(llama-speculative-simple llama-completion)
CMAKE_FLAGS=(-DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=ON
             -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DGGML_NATIVE=ON
             -DGGML_OPENMP=OFF)
command -v ccache >/dev/null && CMAKE_FLAGS+=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)

# GGML_NATIVE compiles for this CPU: a machine with other ISA flags rebuilds.
isa=$(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null | sha256sum | cut -c1-16)
want="$VERSION $SHA256 ${TARGETS[*]} ${CMAKE_FLAGS[*]} isa=$isa"
stamp=$ROOT/.dflash-stamp
if [ "$(cat "$stamp" 2>/dev/null)" == "$want" ]; then
  exit 0
fi

echo "[setup] llama.cpp: building ${TARGETS[*]} from llama-cpp-python==$VERSION into $ROOT (cold: ~15 min on 2 cores)"
mkdir -p "$ROOT"
sdist=$ROOT/llama_cpp_python-$VERSION.tar.gz
if [ "$(sha256sum "$sdist" 2>/dev/null | cut -d' ' -f1)" != "$SHA256" ]; then
  dl=$(mktemp -d)
  "$PY" -m pip download -q --no-deps --no-binary :all: --no-build-isolation -d "$dl" "llama-cpp-python==$VERSION" \
    2>/dev/null || "$PY" -m pip download -q --no-deps --no-binary :all: -d "$dl" "llama-cpp-python==$VERSION"
  got=$(sha256sum "$dl/llama_cpp_python-$VERSION.tar.gz" | cut -d' ' -f1)
  if [ "$got" != "$SHA256" ]; then
    echo "[setup] llama.cpp: llama_cpp_python-$VERSION.tar.gz has sha256 $got, expected $SHA256" >&2
    exit 1
  fi
  mv "$dl/llama_cpp_python-$VERSION.tar.gz" "$sdist"
  rm -rf "$dl"
fi
rm -rf "$ROOT/src"
mkdir -p "$ROOT/src"
tar xzf "$sdist" -C "$ROOT/src" --strip-components=3 "llama_cpp_python-$VERSION/vendor/llama.cpp"
cmake -S "$ROOT/src" -B "$ROOT/build" -G Ninja "${CMAKE_FLAGS[@]}" >"$ROOT/cmake.log" 2>&1 \
  || { tail -20 "$ROOT/cmake.log" >&2; exit 1; }
cmake --build "$ROOT/build" -j "$(nproc)" --target "${TARGETS[@]}" >"$ROOT/build.log" 2>&1 \
  || { tail -20 "$ROOT/build.log" >&2; exit 1; }
echo "$want" > "$stamp"
echo "[setup] llama.cpp: ok ($ROOT/build/bin)"
