"""The repository stands alone: no source, test, script or doc cites a file outside it. The definitions the code
relies on (the DFlash mask and loss, the DSpark and DFlash2 objectives, the formats) live in docs/; a clone has no
sibling folder of specifications. Data read from a folder beside the checkout (`../shared/data`, overridable with
DFLASH_DATA_DIR) is input, not a citation, and stays allowed. Fails naming the file and line."""
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]
FOLDERS = ("src", "tests", "python", "scripts", "docs", ".ci")
TOP_FILES = ("README.md", "Makefile", "CMakeLists.txt")
SUFFIXES = {".h", ".cpp", ".cu", ".cuh", ".inc", ".in", ".py", ".sh", ".md", ".txt", ".cmake", ""}
# A cited document outside the repository: the sibling folder's specifications by name, or any ../shared path but
# its data folder.
OUTSIDE = re.compile(r"\b(?:FAMILIES|SPEC|ANCHORS)\.md\b|\.\./shared/(?!data\b)")
THIS = pathlib.Path(__file__).resolve()


def files():
    for name in TOP_FILES:
        if (ROOT / name).is_file():
            yield ROOT / name
    for folder in FOLDERS:
        for f in sorted((ROOT / folder).rglob("*")):
            if f.is_file() and f.suffix in SUFFIXES and f.resolve() != THIS and "__pycache__" not in f.parts:
                yield f


def citations(paths):
    bad = []
    for f in paths:
        try:
            text = f.read_text()
        except UnicodeDecodeError:
            continue
        for n, line in enumerate(text.splitlines(), 1):
            if OUTSIDE.search(line):
                bad.append(f"{f.relative_to(ROOT)}:{n}: {line.strip()[:120]}")
    return bad


def test_no_file_cites_a_document_outside_the_repository():
    bad = citations(files())
    assert not bad, "cites a document a clone does not have (put what it relies on in docs/):\n" + "\n".join(bad)


def test_the_check_finds_a_citation(tmp_path):
    cited = tmp_path / "x.h"
    cited.write_text("// the mask (../shared/" + "FAMILIES.md 2.2)\n")  # split: this file must not cite it itself
    data = tmp_path / "y.sh"
    data.write_text('DATA="$ROOT/../shared/data"\n')
    (tmp_path / "z.md").write_text("as SPEC.md says\n")
    global ROOT
    saved, ROOT = ROOT, tmp_path
    try:
        bad = citations([cited, data, tmp_path / "z.md"])
    finally:
        ROOT = saved
    assert [b.split(":")[0] for b in bad] == ["x.h", "z.md"]
