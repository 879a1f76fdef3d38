"""Adding a drafter family is one folder in src/families plus one line in its registration table: no other file of
src/ may name a family. "Naming" is what this test can see: a value of the former DrafterFamily enum (or its declaration), a
family's config.json architecture or its name as a quoted string ("dspark", "dflash2.py"), and a file named after
a family. The allowlists below are the remaining work, file by file, of moving the dispatch into the plug-ins
(docs/ARCHITECTURE.md "A drafter family" lists the same files): a file may only leave them, and an entry that no
longer names a family must go, so the lists shrink as the work is done."""
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]
FAMILY_FOLDER = "src/families/"
SOURCES = (".h", ".cpp", ".cu", ".cuh", ".inc", ".in")
NAMING = re.compile(r'DrafterFamily::(?:DFlash2|DSpark|DFlash)\b|enum class DrafterFamily\b'
                    r'|"(?:Qwen3DSparkModel|DFlash2DraftModel|DFlashDraftModel|dspark|dflash2)(?:\.py)?"')
FAMILY_FILE = re.compile(r"^(?:dspark|dflash2)(?:_|\.)|_(?:dspark|dflash2)(?:_|\.)")

# Places outside src/families that still branch on a family or spell it, with how many times (none left: an entry
# here would say why it is not moved yet).
NAMED_IN = {}

# Files named after a family outside its folder (each family's modules belong in its folder, src/families/NAME/).
FAMILY_FILES = set()  # none left: the test fails when one appears

# Kernels and ops of a family's objective, below the families layer by the layering (kernels and ops are what the
# drafter layer is built on; torch.ops.dflash.dspark_lm_loss is a public op name): named after the family, but not
# remaining work.
FAMILY_KERNELS_AND_OPS = {
    "src/kernels/dspark_objective_rows.h", "src/kernels/dspark_objective_rows_cpu.cpp",
    "src/kernels/dspark_objective_rows_cpu_impl.inc", "src/ops/dspark_lm_loss_op.cpp", "src/ops/dspark_lm_loss_op.h",
}


def family_mentions(root):
    """{file: count} of the family names in src/ outside src/families/."""
    found = {}
    for f in sorted((root / "src").rglob("*")):
        rel = f.relative_to(root).as_posix()
        if f.is_file() and f.suffix in SOURCES and not rel.startswith(FAMILY_FOLDER):
            n = len(NAMING.findall(f.read_text()))
            if n:
                found[rel] = n
    return found


def family_files(root):
    return {f.relative_to(root).as_posix() for f in (root / "src").rglob("*")
            if f.is_file() and FAMILY_FILE.search(f.name) and not f.relative_to(root).as_posix().startswith(FAMILY_FOLDER)}


def allowlist_errors(found, allowed):
    errors = []
    for rel, n in sorted(found.items()):
        if rel not in allowed:
            errors.append(f"{rel} names a drafter family {n} time(s): ask the family's plug-in (src/drafter/family.h) "
                          "instead, or put the code in its folder under src/families/")
        elif n > allowed[rel]:
            errors.append(f"{rel} names a drafter family {n} times, {allowed[rel]} allowed: no new branch on a family")
    for rel, n in sorted(allowed.items()):
        if found.get(rel, 0) < n:
            errors.append(f"{rel}: allowed {n}, names a family {found.get(rel, 0)} time(s) now: lower its entry in "
                          "NAMED_IN (and docs/ARCHITECTURE.md's list when it reaches 0)")
    return errors


def test_no_file_outside_the_family_folders_names_a_family():
    errors = allowlist_errors(family_mentions(ROOT), NAMED_IN)
    assert not errors, "\n".join(errors)


def test_no_new_file_is_named_after_a_family_outside_its_folder():
    on_disk = family_files(ROOT)
    allowed = FAMILY_FILES | FAMILY_KERNELS_AND_OPS
    assert not on_disk - allowed, f"put these in the family's folder under src/families/: {sorted(on_disk - allowed)}"
    assert not FAMILY_FILES - on_disk, f"gone or moved, drop them from FAMILY_FILES: {sorted(FAMILY_FILES - on_disk)}"
    assert not FAMILY_KERNELS_AND_OPS - on_disk, ("gone or moved, drop them from FAMILY_KERNELS_AND_OPS: "
                                                  f"{sorted(FAMILY_KERNELS_AND_OPS - on_disk)}")


def test_the_architecture_checklist_lists_the_remaining_files():
    text = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
    section = text.split("### A drafter family", 1)[1].split("\n### ", 1)[0].split("\n## ", 1)[0]
    listed = set(re.findall(r"`(src/[\w./]+)`", section.split("Still naming a family", 1)[1]))
    assert listed == set(NAMED_IN), (f"docs/ARCHITECTURE.md 'Still naming a family' differs from NAMED_IN: missing "
                                     f"{sorted(set(NAMED_IN) - listed)}, extra {sorted(listed - set(NAMED_IN))}")
    for path in re.findall(r"`((?:src|tests)/[\w./]+)`", section):
        assert (ROOT / path).exists(), f"docs/ARCHITECTURE.md 'A drafter family' names {path}, which does not exist"


def test_a_new_branch_and_a_stale_entry_are_reported(tmp_path):
    (tmp_path / "src" / "plan").mkdir(parents=True)
    (tmp_path / "src" / "families" / "toy").mkdir(parents=True)
    (tmp_path / "src" / "plan" / "p.cpp").write_text("if (f == DrafterFamily::DSpark) {}\nname == \"dflash2\";\n")
    (tmp_path / "src" / "families" / "toy" / "t.cpp").write_text("DrafterFamily::DSpark \"dspark\"\n")
    (tmp_path / "src" / "plan" / "dspark_cost.h").write_text("")
    found = family_mentions(tmp_path)
    assert found == {"src/plan/p.cpp": 2}
    assert allowlist_errors(found, {}) == [
        "src/plan/p.cpp names a drafter family 2 time(s): ask the family's plug-in (src/drafter/family.h) instead, or "
        "put the code in its folder under src/families/"]
    assert allowlist_errors(found, {"src/plan/p.cpp": 1})[0].endswith("1 allowed: no new branch on a family")
    assert allowlist_errors(found, {"src/plan/p.cpp": 2, "src/plan/q.cpp": 1}) == [
        "src/plan/q.cpp: allowed 1, names a family 0 time(s) now: lower its entry in NAMED_IN (and "
        "docs/ARCHITECTURE.md's list when it reaches 0)"]
    assert family_files(tmp_path) == {"src/plan/dspark_cost.h"}
