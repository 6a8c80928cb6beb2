"""Each GGUF tensor type that loads, dequantized from blocks whose values are known.

Each test packs chosen integers and scales into bytes as llama.cpp's ``ggml-common.h`` lays a
block out (the packing is written here from the layout, not taken from the package), and checks
``kernels.model.gguf.quants.dequantize`` against the value each element must have.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from kernel_contracts.kernels.model.gguf.quants import SUPPORTED, dequantize, row_bytes

IDS = {info.name: type_id for type_id, info in SUPPORTED.items()}


def _half(x: float) -> bytes:
    return np.float16(x).tobytes()


def _values(name: str, raw: bytes, width: int) -> np.ndarray:
    return dequantize(np.frombuffer(raw, np.uint8), IDS[name], width)


def test_the_types_that_load():
    assert sorted(IDS) == ["BF16", "F16", "F32", "Q4_0", "Q4_1", "Q4_K", "Q6_K", "Q8_0"]
    assert row_bytes(IDS["Q4_K"], 512) == 2 * 144 and row_bytes(IDS["Q8_0"], 64) == 2 * 34


def test_float_types():
    x = np.array([1.0, -2.5, 0.0, 65504.0, 3.0e-5, -0.1], np.float32)
    assert _values("F32", x.tobytes(), 6).tolist() == [x.tolist()]
    np.testing.assert_array_equal(_values("F16", x.astype(np.float16).tobytes(), 6)[0],
                                  x.astype(np.float16).astype(np.float32))  # fmt: skip
    bits = np.array([0x3F80, 0xC020, 0x0000, 0x4049, 0x7F80, 0x0001], np.uint16)
    want = bits.view(ml_dtypes.bfloat16).astype(np.float32)
    assert want[:4].tolist() == [1.0, -2.5, 0.0, 3.140625]
    np.testing.assert_array_equal(_values("BF16", bits.tobytes(), 6)[0], want)


def test_q8_0():
    q = np.arange(-16, 16, dtype=np.int8)
    raw = _half(0.5) + q.tobytes() + _half(-0.125) + q[::-1].tobytes()
    got = _values("Q8_0", raw, 64)
    np.testing.assert_array_equal(got[0], np.concatenate([0.5 * q, -0.125 * q[::-1]]))


def _nibbles(q: np.ndarray) -> bytes:
    """32 4-bit values: byte j holds value j (low nibble) and value j + 16 (high nibble)."""
    return (q[:16] | (q[16:] << 4)).astype(np.uint8).tobytes()


def test_q4_0():
    q = np.array([(7 * i + 3) % 16 for i in range(32)], np.uint8)
    got = _values("Q4_0", _half(0.25) + _nibbles(q), 32)
    np.testing.assert_array_equal(got[0], 0.25 * (q.astype(np.float32) - 8))
    assert got[0, 0] == 0.25 * (3 - 8) and got[0, 16] == 0.25 * ((7 * 16 + 3) % 16 - 8)


def test_q4_1():
    q = np.array([(5 * i + 1) % 16 for i in range(32)], np.uint8)
    got = _values("Q4_1", _half(0.5) + _half(-1.0) + _nibbles(q), 32)
    np.testing.assert_array_equal(got[0], 0.5 * q.astype(np.float32) - 1.0)


def _k_scales(sc: np.ndarray, mins: np.ndarray) -> bytes:
    """Eight 6-bit scales and eight 6-bit mins in the 12 bytes of a Q4_K block."""
    out = np.zeros(12, np.uint8)
    for j in range(4):
        out[j] = sc[j] | ((sc[j + 4] >> 4) << 6)
        out[j + 4] = mins[j] | ((mins[j + 4] >> 4) << 6)
        out[j + 8] = (sc[j + 4] & 0xF) | ((mins[j + 4] & 0xF) << 4)
    return out.tobytes()


def test_q4_k():
    rng = np.random.default_rng(0)
    sc = rng.integers(0, 64, 8).astype(np.uint8)
    mins = rng.integers(0, 64, 8).astype(np.uint8)
    sc[5], mins[6] = 63, 48  # the high bits of both packings in use
    q = rng.integers(0, 16, 256).astype(np.uint8)
    qs = np.zeros(128, np.uint8)
    for c in range(4):  # 64 values per 32 bytes: sub-block 2c low nibbles, 2c + 1 high
        qs[32 * c : 32 * c + 32] = q[64 * c : 64 * c + 32] | (q[64 * c + 32 : 64 * c + 64] << 4)
    d, dmin = 0.5, 0.25
    raw = _half(d) + _half(dmin) + _k_scales(sc, mins) + qs.tobytes()
    sub = np.arange(256) // 32
    want = d * sc[sub].astype(np.float32) * q - dmin * mins[sub].astype(np.float32)
    np.testing.assert_array_equal(_values("Q4_K", raw, 256)[0], want.astype(np.float32))


def test_q6_k():
    rng = np.random.default_rng(1)
    q = rng.integers(0, 64, 256).astype(np.uint8)  # stored 6-bit values; the value is q - 32
    scales = rng.integers(-128, 128, 16).astype(np.int8)
    ql, qh = np.zeros(128, np.uint8), np.zeros(64, np.uint8)
    for half in range(2):  # 128 values: 64 ql bytes, 32 qh bytes
        y, lo, hi = q[128 * half : 128 * half + 128], ql[64 * half :], qh[32 * half :]
        for i in range(32):
            lo[i] = (y[i] & 0xF) | ((y[i + 64] & 0xF) << 4)
            lo[i + 32] = (y[i + 32] & 0xF) | ((y[i + 96] & 0xF) << 4)
            hi[i] = (y[i] >> 4) | ((y[i + 32] >> 4) << 2) | ((y[i + 64] >> 4) << 4)
            hi[i] |= (y[i + 96] >> 4) << 6
    d = 0.0625
    raw = ql.tobytes() + qh.tobytes() + scales.tobytes() + _half(d)
    want = d * scales[np.arange(256) // 16].astype(np.float32) * (q.astype(np.float32) - 32)
    np.testing.assert_array_equal(_values("Q6_K", raw, 256)[0], want.astype(np.float32))


@pytest.mark.parametrize("name", ["Q8_0", "Q4_1"])
def test_rows_are_blocks_in_order(name):
    """A tensor of several rows of several blocks: row r, block b is the r·blocks + b-th block."""
    block = 34 if name == "Q8_0" else 20
    rng = np.random.default_rng(2)
    blocks = [rng.integers(0, 256, block, dtype=np.uint8).tobytes() for _ in range(6)]
    for i in range(6):  # finite half-precision scales
        blocks[i] = (
            _half(0.5 + i)
            + (_half(-1.0) if name == "Q4_1" else b"")
            + blocks[i][(4 if name == "Q4_1" else 2) :]
        )
    whole = _values(name, b"".join(blocks), 64)
    assert whole.shape == (3, 64)
    for i in range(6):
        np.testing.assert_array_equal(whole[i // 2, 32 * (i % 2) : 32 * (i % 2) + 32],
                                      _values(name, blocks[i], 32)[0])  # fmt: skip
