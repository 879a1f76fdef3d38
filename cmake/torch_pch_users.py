"""Prints, one a line, the sources (of those given) that reach <ATen/ATen.h> or a <torch/...> header through their
#include lines, following the project's own headers by name (header names are unique across the tree:
tests/python/test_layering.py). Only these get the precompiled LibTorch header (cmake/dflash_torch_pch.cmake):
loading it costs ~3 CPU-seconds, more than a file that includes only <ATen/core/Tensor.h> or no torch saves.
usage: torch_pch_users.py ROOT source..."""
import pathlib
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]', re.M)
HEAVY = re.compile(r"^(ATen/ATen\.h|torch/(?!headeronly/).*)$")


def main():
    root = pathlib.Path(sys.argv[1])
    headers = {}
    for folder in ("src", "tests"):
        for h in (root / folder).rglob("*.h"):
            headers.setdefault(h.name, h)
    memo = {}

    def heavy(path):
        if path in memo:
            return memo[path]
        memo[path] = False  # an include cycle adds nothing
        try:
            text = path.read_text(errors="replace")
        except OSError:
            return False
        for kind, name in INCLUDE.findall(text):
            if kind == "<" and HEAVY.match(name):
                memo[path] = True
                break
            if kind == '"':
                h = headers.get(pathlib.PurePath(name).name)
                if h is not None and heavy(h):
                    memo[path] = True
                    break
        return memo[path]

    for source in sys.argv[2:]:
        if heavy(pathlib.Path(source)):
            print(source)


if __name__ == "__main__":
    main()
