"""The dflash command line: every subcommand it lists answers --help, and bad words are clear errors."""
import subprocess

import pytest


def run(dflash_bin, *args):
    return subprocess.run([dflash_bin, *args], capture_output=True, text=True, timeout=60)


def listed_subcommands(dflash_bin):
    out = run(dflash_bin, "--help")
    assert out.returncode == 0, out.stderr
    rows = [line.strip() for line in out.stdout.splitlines() if line.startswith("  ")]
    # Each row is "<words>   <summary>"; the words are separated by single spaces, the summary by several.
    return [row.split("  ")[0].split() for row in rows]


@pytest.mark.slow
def test_every_subcommand_has_help(dflash_bin):
    subcommands = listed_subcommands(dflash_bin)
    assert ["bench", "attention"] in subcommands
    for words in subcommands:
        out = run(dflash_bin, *words, "--help")
        assert out.returncode == 0, f"{words}: {out.stderr}"
        assert "usage: dflash " + " ".join(words) in out.stdout, f"{words}: {out.stdout[:200]}"


def test_group_help_lists_its_entries(dflash_bin):
    out = run(dflash_bin, "bench", "--help")
    assert out.returncode == 0
    assert "bench attention" in out.stdout


def test_unknown_subcommand_and_option_are_errors(dflash_bin):
    out = run(dflash_bin, "no-such-command")
    assert out.returncode == 2 and "unknown subcommand 'no-such-command'" in out.stderr
    out = run(dflash_bin, "bench", "attention", "--no-such-flag")
    assert out.returncode != 0 and "unknown option --no-such-flag" in out.stderr
    out = run(dflash_bin, "bench", "attention", "--configs", "nope")
    assert out.returncode != 0 and "unknown config 'nope'" in out.stderr
