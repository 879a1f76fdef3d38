"""Interoperability of the C++ safetensors reader/writer with the pip `safetensors` package, and the
errors for damaged files (through `dflash safetensors info|copy`)."""
import json
import struct
import subprocess

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

DTYPES = [torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.int32,
          torch.int16, torch.int8, torch.uint8, torch.bool]


def _tensors():
    g = torch.Generator().manual_seed(0)
    out = {}
    for dt in DTYPES:
        name = str(dt).replace("torch.", "")
        if dt.is_floating_point:
            t = torch.randn(3, 5, generator=g).to(dt)
        elif dt == torch.bool:
            t = torch.randint(0, 2, (4, 3), generator=g).bool()
        else:
            lo, hi = (0, 255) if dt == torch.uint8 else (-100, 100)
            t = torch.randint(lo, hi, (2, 7), generator=g).to(dt)
        out[name] = t
    out["scalar"] = torch.tensor(2.5)
    out["empty"] = torch.zeros(0, 3)
    out["big"] = torch.randn(64, 33, generator=g)
    return out


def _run(dflash_bin, *args):
    return subprocess.run([dflash_bin, *args], capture_output=True, text=True)


def test_pip_written_files_round_trip_through_dflash(dflash_bin, tmp_path):
    src, dst = tmp_path / "pip.safetensors", tmp_path / "ours.safetensors"
    ts = _tensors()
    save_file(ts, str(src), metadata={"format": "pt", "k": "v"})
    r = _run(dflash_bin, "safetensors", "copy", "--input", str(src), "--output", str(dst))
    assert r.returncode == 0, r.stderr
    got = load_file(str(dst))
    assert set(got) == set(ts)
    for k, t in ts.items():
        assert got[k].dtype == t.dtype, k
        assert got[k].shape == t.shape, k
        assert torch.equal(got[k], t), k
    with safe_open(str(dst), "pt") as f:
        assert f.metadata() == {"format": "pt", "k": "v"}
    info = _run(dflash_bin, "safetensors", "info", "--file", str(dst))
    assert info.returncode == 0, info.stderr
    assert "bfloat16 BF16 [3,5]" in info.stdout


def _raw(header: dict, data: bytes) -> bytes:
    h = json.dumps(header).encode()
    return struct.pack("<Q", len(h)) + h + data


CORRUPT = {
    "truncated_data": (lambda good: good[:-4], ["tensor 'w'", "data_offsets", "past the data section"]),
    "truncated_header": (lambda good: good[:12], ["header length", "past the end"]),
    "too_short": (lambda good: good[:3], ["too short"]),
    "bad_json": (lambda good: struct.pack("<Q", 10) + b"{\"w\": [1, " + b"\0" * 16, ["not valid JSON"]),
    "overlap": (lambda good: _raw({"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 12]},
                                   "b": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}}, b"\0" * 16),
                ["tensor 'b'", "overlaps tensor 'a'"]),
    "size_mismatch": (lambda good: _raw({"w": {"dtype": "F16", "shape": [4], "data_offsets": [0, 16]}}, b"\0" * 16),
                      ["tensor 'w'", "expected 8"]),
    "unknown_dtype": (lambda good: _raw({"w": {"dtype": "F8_E4M3", "shape": [16], "data_offsets": [0, 16]}},
                                        b"\0" * 16), ["tensor 'w'", "'dtype'", "F8_E4M3", "expected one of"]),
    "negative_shape": (lambda good: _raw({"w": {"dtype": "U8", "shape": [-16], "data_offsets": [0, 16]}},
                                         b"\0" * 16), ["tensor 'w'", "negative"]),
}


@pytest.mark.parametrize("case", sorted(CORRUPT))
def test_damaged_files_give_clear_errors(dflash_bin, tmp_path, case):
    good = tmp_path / "good.safetensors"
    save_file({"w": torch.arange(16, dtype=torch.float32)}, str(good))
    make, expected = CORRUPT[case]
    bad = tmp_path / f"{case}.safetensors"
    bad.write_bytes(make(good.read_bytes()))
    r = _run(dflash_bin, "safetensors", "info", "--file", str(bad))
    assert r.returncode != 0
    assert str(bad) in r.stderr, r.stderr
    for part in expected:
        assert part in r.stderr, (part, r.stderr)
    assert "Segmentation" not in r.stderr and "terminate called" not in r.stderr
