"""docs/ARCHITECTURE.md's "A target" checklist, kept honest: every TargetArch value has its row in one file of
src/models/arch/ and its place in arch_table.cpp, and no code outside src/models/arch/ spells an architecture's
model_type (the enum is compared instead). Fails naming the value, the file and the line."""
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]
ARCH = ROOT / "src" / "models" / "arch"


def enum_values():
    header = (ROOT / "src" / "models" / "target_config.h").read_text()
    body = re.search(r"enum class TargetArch : \w+ \{([^}]*)\}", header)
    assert body, "target_config.h: enum class TargetArch not found"
    return [v.strip() for v in body.group(1).split(",") if v.strip()]


def rows():
    """{enum value: (file, its model_type spellings)} from the rows the arch files define."""
    out = {}
    row = re.compile(r'\{TargetArch::(\w+), "\w+", \{([^}]*)\}')
    for f in sorted(ARCH.glob("*_arch.cpp")):
        for value, spellings in row.findall(f.read_text()):
            assert value not in out, f"TargetArch::{value} has rows in {out[value][0]} and {f.name}"
            out[value] = (f.name, re.findall(r'"(\w+)"', spellings))
    return out


def test_every_architecture_has_one_row_in_its_file_and_in_the_table():
    values, found = enum_values(), rows()
    table = (ARCH / "arch_table.cpp").read_text()
    listed = re.findall(r"&(\w+)_arch\(\)", table)
    assert [f"{v}" for v in values] == listed, f"arch_table.cpp lists {listed}, the enum is {values} (same order)"
    for v in values:
        assert v in found, f"TargetArch::{v} has no row in src/models/arch/*_arch.cpp"
    assert sorted(found) == sorted(values), f"rows for values the enum lacks: {sorted(set(found) - set(values))}"


def test_no_code_outside_the_arch_folder_spells_a_model_type():
    spellings = {s for _, ss in rows().values() for s in ss}
    literal = re.compile(r'"(' + "|".join(sorted(spellings)) + r')"')
    bad = []
    for f in sorted((ROOT / "src").rglob("*")):
        # src/drafter: the drafter's own config.json says model_type "qwen3" (the DFlash drafter format)
        if not f.is_file() or f.suffix not in (".h", ".cpp", ".in") or ARCH in f.parents or "drafter" in f.parts:
            continue
        for n, line in enumerate(f.read_text().splitlines(), 1):
            code = line.split("//", 1)[0]
            if literal.search(code) or re.search(r"\.model_type\b", code):
                bad.append(f"{f.relative_to(ROOT)}:{n}: {line.strip()}")
    assert not bad, "compare TargetConfig::arch (a TargetArch) instead:\n" + "\n".join(bad)
