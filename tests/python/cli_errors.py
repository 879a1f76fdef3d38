"""The one check every hostile-input test makes of a refused command: a clean one-line error, no stack trace."""

PREFIX = "dflash: error: "


def one_line_error(r, *parts, code=1):
    """Exit `code`, a `dflash: error:` line first on stderr naming every part, no stack trace; with code 1 (a refused
    input) that line is all of stderr. Returns the line."""
    assert r.returncode == code, (r.returncode, r.stdout[-500:], r.stderr)
    lines = r.stderr.strip().splitlines()
    assert lines and lines[0].startswith(PREFIX), r.stderr
    assert "frame #" not in r.stderr and "Exception raised from" not in r.stderr, r.stderr
    if code == 1:
        assert len(lines) == 1, r.stderr
    for p in parts:
        assert str(p) in lines[0], (p, lines[0])
    return lines[0]
