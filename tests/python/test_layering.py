"""The layering is real: every #include in src/<layer> and tests/<layer> names a header of the same layer or of a
lower one, where "lower" is the order of README.md's layer table (its spec). Fails naming the file, the header and
both layers."""
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]
SOURCES = (".h", ".cpp", ".cu", ".cuh", ".inc", ".in")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', flags=re.M)


def readme_layers(root):
    rows = re.findall(r"^\| `src/(\w+)` \|", (root / "README.md").read_text(), flags=re.M)
    assert rows, f"{root / 'README.md'}: layer table not found (rows like | `src/util` | ... |)"
    return rows


def header_owners(root, layers):
    owners = {}
    for layer in layers:
        for f in (root / "src" / layer).rglob("*"):
            if f.is_file() and f.suffix in SOURCES:
                owners.setdefault(f.name, set()).add(layer)
    return owners


def violations(root):
    """Includes that point up the layer table, as readable lines."""
    layers = readme_layers(root)
    rank = {layer: i for i, layer in enumerate(layers)}
    owners = header_owners(root, layers)
    bad = []
    for top in ("src", "tests"):
        for layer in layers:
            for f in sorted((root / top / layer).rglob("*")):
                if not f.is_file() or f.suffix not in SOURCES:
                    continue
                for name in INCLUDE.findall(f.read_text()):
                    owner = owners.get(pathlib.Path(name).name, set())
                    above = sorted(o for o in owner if rank[o] > rank[layer])
                    if above and layer not in owner:
                        bad.append(f"{f.relative_to(root)} includes {name} of src/{above[0]}, a higher layer than {layer}")
    return bad


def test_every_layer_folder_is_in_the_readme_table():
    on_disk = {p.name for p in (ROOT / "src").iterdir() if p.is_dir()}
    assert on_disk == set(readme_layers(ROOT)), "add the layer to README.md's table in its place"


def test_header_names_are_unique_across_layers():
    dup = {h: sorted(ls) for h, ls in header_owners(ROOT, readme_layers(ROOT)).items() if len(ls) > 1}
    assert not dup, f"the same header name in several layers makes includes ambiguous: {dup}"


def test_includes_run_downward_only():
    bad = violations(ROOT)
    assert not bad, "\n".join(bad)


def test_an_upward_include_is_reported(tmp_path):
    (tmp_path / "README.md").write_text("| layer | |\n| --- | --- |\n| `src/kernels` | k |\n| `src/drafter` | d |\n")
    for layer, name, text in [("kernels", "k.cpp", '#include "d.h"\n#include "k.h"\n'), ("kernels", "k.h", ""),
                              ("drafter", "d.h", '#include "k.h"\n')]:
        (tmp_path / "src" / layer).mkdir(parents=True, exist_ok=True)
        (tmp_path / "src" / layer / name).write_text(text)
    (tmp_path / "tests" / "kernels").mkdir(parents=True)
    (tmp_path / "tests" / "kernels" / "t.cpp").write_text('  #  include "d.h"\n')
    assert violations(tmp_path) == [
        "src/kernels/k.cpp includes d.h of src/drafter, a higher layer than kernels",
        "tests/kernels/t.cpp includes d.h of src/drafter, a higher layer than kernels",
    ]
