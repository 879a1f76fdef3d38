"""docs/ARCHITECTURE.md's "A target" checklist, kept honest: adding an architecture is one file of src/models/arch/
plus one line in arch/arch_list.h. Every listed architecture has its row in one file of src/models/arch/, no build
file lists those files, no code outside src/models/arch/ spells an architecture's model_type (the enum is compared
instead) and no code outside it branches on a TargetArch value (it reads what the row says the architecture
implies: TargetArchInfo). Fails naming the value, the file and the line."""
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]
ARCH = ROOT / "src" / "models" / "arch"
SOURCES = (".h", ".cpp", ".cu", ".cuh", ".inc", ".in")

# Files outside src/models/arch that still name a TargetArch value in src/, with how many times. None is left; an
# entry may only go (or its count drop), so the list can only shrink.
ARCH_NAMED_IN = {}

# A comparison with, or a case label of, a TargetArch value: what tests/ may not do either (a test may build a
# config of an architecture, `c.arch = TargetArch::qwen3`, and check a parsed one, `EXPECT_EQ(c.arch, ...)`).
BRANCH = re.compile(r"[=!]=\s*(?:\w+::)*TargetArch::\w+|TargetArch::\w+\s*[=!]=|\bcase\s+(?:\w+::)*TargetArch::\w+")
NAMED = re.compile(r"TargetArch::\w+")


def enum_values():
    """The architectures of arch_list.h, in TargetArch order."""
    listing = (ARCH / "arch_list.h").read_text()
    body = re.search(r"#define DFLASH_TARGET_ARCHS\(X\)((?:[^\n]*\\\n)*[^\n]*)", listing)
    assert body, "arch/arch_list.h: #define DFLASH_TARGET_ARCHS(X) not found"
    return re.findall(r"\bX\((\w+)\)", body.group(1))


def rows():
    """{enum value: (file, its model_type spellings)} from the rows the arch files define."""
    out = {}
    row = re.compile(r'\{TargetArch::(\w+), "\w+", \{([^}]*)\}')
    for f in sorted(ARCH.glob("*_arch.cpp")):
        for value, spellings in row.findall(f.read_text()):
            assert value not in out, f"TargetArch::{value} has rows in {out[value][0]} and {f.name}"
            out[value] = (f.name, re.findall(r'"(\w+)"', spellings))
    return out


def code_lines(f):
    for n, line in enumerate(f.read_text().splitlines(), 1):
        yield n, line, line.split("//", 1)[0]


def test_every_architecture_has_one_row_in_its_file_and_in_the_list():
    values, found = enum_values(), rows()
    assert values, "arch/arch_list.h lists no architecture"
    assert len(set(values)) == len(values), f"arch/arch_list.h lists an architecture twice: {values}"
    for v in values:
        assert v in found, f"TargetArch::{v} (arch/arch_list.h) has no row in src/models/arch/*_arch.cpp"
        defined = re.compile(r"const TargetArchRow& " + v + r"_arch\(\) \{")
        assert defined.search((ARCH / found[v][0]).read_text()), f"{found[v][0]} defines no {v}_arch() for its row"
    assert sorted(found) == sorted(values), f"rows for values arch_list.h lacks: {sorted(set(found) - set(values))}"
    # The enum, the row declarations and the table are made from the list, not written again.
    assert "DFLASH_TARGET_ARCHS(" in (ROOT / "src" / "models" / "target_config.h").read_text()
    for name in ("arch_rows.h", "arch_table.cpp"):
        assert "DFLASH_TARGET_ARCHS(" in (ARCH / name).read_text(), f"arch/{name} does not use arch_list.h"


def test_no_build_file_lists_an_architecture_file():
    files = re.compile(r"\b(?:" + "|".join(re.escape(f.name) for f in ARCH.glob("*.cpp")) + r")\b")
    bad = []
    for f in sorted(ROOT.rglob("CMakeLists.txt")):
        top = f.relative_to(ROOT).parts[0]
        if top not in ("src", "tests", "CMakeLists.txt"):  # build trees, the venv, downloaded models
            continue
        for n, line, _ in code_lines(f):
            if files.search(line.split("#", 1)[0]):
                bad.append(f"{f.relative_to(ROOT)}:{n}: {line.strip()}")
    assert not bad, "glob src/models/arch/*.cpp instead (a new architecture is one file):\n" + "\n".join(bad)


def test_no_code_outside_the_arch_folder_spells_a_model_type():
    spellings = {s for _, ss in rows().values() for s in ss}
    literal = re.compile(r'"(' + "|".join(sorted(spellings)) + r')"')
    bad = []
    for f in sorted((ROOT / "src").rglob("*")):
        # src/drafter: the drafter's own config.json says model_type "qwen3" (the DFlash drafter format)
        if not f.is_file() or f.suffix not in (".h", ".cpp", ".in") or ARCH in f.parents or "drafter" in f.parts:
            continue
        for n, line, code in code_lines(f):
            if literal.search(code) or re.search(r"\.model_type\b", code):
                bad.append(f"{f.relative_to(ROOT)}:{n}: {line.strip()}")
    assert not bad, "compare TargetConfig::arch (a TargetArch) instead:\n" + "\n".join(bad)


def arch_mentions(root):
    """({file: count} of TargetArch values named in src/ outside src/models/arch, [comparisons in tests/])."""
    named, branches = {}, []
    arch = root / "src" / "models" / "arch"
    for f in sorted((root / "src").rglob("*")):
        if f.is_file() and f.suffix in SOURCES and arch not in f.parents:
            n = sum(len(NAMED.findall(code)) for _, _, code in code_lines(f))
            if n:
                named[f.relative_to(root).as_posix()] = n
    for f in sorted((root / "tests").rglob("*")):
        if f.is_file() and f.suffix in SOURCES:
            branches += [f"{f.relative_to(root).as_posix()}:{n}: {line.strip()}"
                         for n, line, code in code_lines(f) if BRANCH.search(code)]
    return named, branches


def allowlist_errors(found, allowed):
    errors = []
    for rel, n in sorted(found.items()):
        if n > allowed.get(rel, 0):
            errors.append(f"{rel} names a TargetArch value {n} time(s), {allowed.get(rel, 0)} allowed: read what the "
                          "architecture implies from its row (TargetConfig::info(), a field of TargetArchInfo set in "
                          "its file of src/models/arch) instead of branching on the value")
    for rel, n in sorted(allowed.items()):
        if found.get(rel, 0) < n:
            errors.append(f"{rel}: allowed {n}, names a TargetArch value {found.get(rel, 0)} time(s) now: lower its "
                          "entry in ARCH_NAMED_IN")
    return errors


def test_no_code_outside_the_arch_folder_branches_on_an_architecture():
    named, branches = arch_mentions(ROOT)
    errors = allowlist_errors(named, ARCH_NAMED_IN)
    assert not errors, "\n".join(errors)
    assert not branches, "tests compare TargetArch values (test what the row implies instead):\n" + "\n".join(branches)


def test_a_new_branch_and_a_stale_entry_are_reported(tmp_path):
    (tmp_path / "src" / "plan").mkdir(parents=True)
    (tmp_path / "src" / "models" / "arch").mkdir(parents=True)
    (tmp_path / "tests").mkdir()
    (tmp_path / "src" / "plan" / "p.cpp").write_text(
        "if (c.arch == TargetArch::gpt_oss) {}  // TargetArch::llama in a comment is not code\n"
        "switch (a) { case models::TargetArch::qwen3: break; }\n")
    (tmp_path / "src" / "models" / "arch" / "gpt_oss_arch.cpp").write_text("TargetArch::gpt_oss\n")
    (tmp_path / "tests" / "t.cpp").write_text("c.arch = TargetArch::qwen3;\nif (TargetArch::llama != c.arch) {}\n")
    named, branches = arch_mentions(tmp_path)
    assert named == {"src/plan/p.cpp": 2}
    assert branches == ["tests/t.cpp:2: if (TargetArch::llama != c.arch) {}"]
    assert allowlist_errors(named, {})[0].startswith("src/plan/p.cpp names a TargetArch value 2 time(s), 0 allowed")
    assert allowlist_errors(named, {"src/plan/p.cpp": 2}) == []
    assert allowlist_errors(named, {"src/plan/p.cpp": 3}) == [
        "src/plan/p.cpp: allowed 3, names a TargetArch value 2 time(s) now: lower its entry in ARCH_NAMED_IN"]
