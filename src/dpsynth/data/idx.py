"""Reader for the IDX format of MNIST / Fashion-MNIST (Y. LeCun's spec).

Layout: two zero bytes, a type code (0x08 = uint8), the number of dimensions, then
one big-endian uint32 per dimension, then the data. We only accept uint8 (the
datasets we read) and check that the payload length matches the header exactly, so a
truncated or padded file is an error rather than silently misshapen data.
"""

from __future__ import annotations

import struct

import numpy as np

from dpsynth.errors import DataError

_UINT8 = 0x08


def parse_idx(data: bytes, source: str = "<bytes>", expect_ndim: int | None = None) -> np.ndarray:
    """Parse decompressed IDX bytes into a uint8 array, validating header and length."""
    if len(data) < 4:
        raise DataError(f"{source}: not an IDX file (only {len(data)} bytes)")
    zero, dtype_code, ndim = struct.unpack(">HBB", data[:4])
    if zero != 0 or dtype_code != _UINT8 or ndim == 0:
        raise DataError(
            f"{source}: wrong IDX magic number 0x{data[:4].hex()} "
            f"(expected 0x000008NN: uint8 with NN dimensions)"
        )
    if expect_ndim is not None and ndim != expect_ndim:
        raise DataError(f"{source}: IDX file has {ndim} dimensions, expected {expect_ndim}")
    header = 4 + 4 * ndim
    if len(data) < header:
        raise DataError(f"{source}: truncated IDX header ({len(data)} bytes, need {header})")
    shape = struct.unpack(f">{ndim}I", data[4:header])
    expected = header + int(np.prod(shape, dtype=np.int64))
    if len(data) != expected:
        kind = "truncated" if len(data) < expected else "has trailing bytes"
        raise DataError(
            f"{source}: IDX file {kind}: header says shape {tuple(shape)} = {expected} bytes, file has {len(data)}"
        )
    return np.frombuffer(data, dtype=np.uint8, offset=header).reshape(shape).copy()
