"""params.bin: the weights of a bundle (format: docs/bundle-format.md).

Little-endian header ``PKPARAMS``, u32 version 1, u32 tensor count, u64 file size; then one
table record per tensor (u16 name length, UTF-8 name, u8 dtype code, u8 ndim, i64 dims,
u64 data offset, u64 data size); then each tensor's data at the next multiple of 64 bytes.
The file ends where the last tensor's data ends (where the table ends if there is none).
"""

from __future__ import annotations

import struct

import numpy as np

MAGIC = b"PKPARAMS"
VERSION = 1
ALIGN = 64
MAX_NDIM = 32  # PK_MAX_NDIM of the C runtime
HEADER = struct.Struct("<8sIIQ")

# dtype name -> code, as in the C runtime's pk_dtype.
DTYPE_CODES = {
    "float32": 1,
    "float64": 2,
    "int8": 3,
    "int16": 4,
    "int32": 5,
    "int64": 6,
    "uint8": 7,
    "uint16": 8,
    "uint32": 9,
    "uint64": 10,
    "bool": 11,
}
_CODE_DTYPES = {code: np.dtype(name).newbyteorder("<") for name, code in DTYPE_CODES.items()}


def _align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def _record(name: str, a: np.ndarray) -> bytes:
    raw = name.encode("utf-8")
    if len(raw) > 0xFFFF:
        raise ValueError(f"params: tensor name {name[:40]!r}... is longer than 65535 bytes")
    code = DTYPE_CODES.get(a.dtype.name)
    if code is None:
        raise ValueError(f"params: tensor {name!r} has unsupported dtype {a.dtype}")
    if a.ndim > MAX_NDIM:
        raise ValueError(f"params: tensor {name!r} has {a.ndim} dims, at most {MAX_NDIM}")
    dims = struct.pack(f"<{a.ndim}q", *a.shape)
    return struct.pack("<H", len(raw)) + raw + struct.pack("<BB", code, a.ndim) + dims


def file_size(tensors: list[tuple[str, tuple[int, ...], int]]) -> int:
    """The size write_params gives for tensors (name, shape, bytes per element), computed
    without their data."""
    end = HEADER.size + sum(2 + len(n.encode("utf-8")) + 2 + 8 * len(s) + 16 for n, s, _ in tensors)
    for _, shape, itemsize in tensors:
        end = _align(end) + int(np.prod(shape, dtype=object)) * itemsize
    return end


def write_params(tensors: list[tuple[str, np.ndarray]]) -> bytes:
    """The params.bin image of ``tensors`` (name, array), in the given order."""
    names = [n for n, _ in tensors]
    if len(set(names)) != len(names):
        dup = next(n for n in names if names.count(n) > 1)
        raise ValueError(f"params: tensor name {dup!r} appears twice")
    arrays = [np.asarray(a) for _, a in tensors]
    records = [_record(n, a) for n, a in zip(names, arrays, strict=True)]
    # Offsets follow from the table size, which needs 16 bytes per record for them.
    pos = HEADER.size + sum(len(r) + 16 for r in records)
    table, chunks, end = [], [], pos
    for rec, a in zip(records, arrays, strict=True):
        data = np.ascontiguousarray(a, dtype=a.dtype.newbyteorder("<")).tobytes()
        offset = _align(end)
        table.append(rec + struct.pack("<QQ", offset, len(data)))
        chunks.append(b"\0" * (offset - end) + data)
        end = offset + len(data)
    header = HEADER.pack(MAGIC, VERSION, len(records), end)
    return header + b"".join(table) + b"".join(chunks)


class _Reader:
    def __init__(self, data: bytes):
        self.data, self.pos = data, 0

    def take(self, fmt: str, what: str) -> tuple:
        size = struct.calcsize(fmt)
        if len(self.data) - self.pos < size:
            raise ValueError(f"params: file truncated in {what} (offset {self.pos})")
        out = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += size
        return out


def _read_record(r: _Reader, i: int, file_size: int, data_end: int):
    (name_len,) = r.take("<H", f"tensor {i} name length")
    if len(r.data) - r.pos < name_len:
        raise ValueError(f"params: file truncated in tensor {i} name (offset {r.pos})")
    try:
        name = r.data[r.pos : r.pos + name_len].decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"params: tensor {i} name is not UTF-8") from e
    r.pos += name_len
    code, ndim = r.take("<BB", f"tensor {i} dtype")
    if code not in _CODE_DTYPES:
        raise ValueError(f"params: tensor {i} {name!r}: unknown dtype code {code}")
    if ndim > MAX_NDIM:
        raise ValueError(f"params: tensor {i} {name!r}: ndim {ndim} over limit {MAX_NDIM}")
    shape = r.take(f"<{ndim}q", f"tensor {i} dims")
    if any(d < 0 for d in shape):
        raise ValueError(f"params: tensor {i} {name!r}: negative dim in {shape}")
    offset, size = r.take("<QQ", f"tensor {i} data offset")
    dtype = _CODE_DTYPES[code]
    want = int(np.prod(shape, dtype=object)) * dtype.itemsize
    if size != want:
        raise ValueError(f"params: tensor {i} {name!r}: data size {size}, shape needs {want}")
    if offset % ALIGN or offset < data_end or offset + size > file_size:
        raise ValueError(
            f"params: tensor {i} {name!r}: data at offset {offset} size {size} is misaligned, "
            f"overlaps earlier data or is past the end ({file_size} bytes)"
        )
    return name, dtype, shape, offset, size


def read_params(data: bytes) -> dict[str, np.ndarray]:
    """Parse a params.bin image; raises ValueError naming the field at fault."""
    data = bytes(data)
    if len(data) < HEADER.size:
        raise ValueError(f"params: {len(data)} bytes is shorter than the header")
    magic, version, count, total = HEADER.unpack_from(data, 0)
    if magic != MAGIC:
        raise ValueError("params: bad magic (not a params file)")
    if version != VERSION:
        raise ValueError(f"params: version {version}, expected {VERSION}")
    if total != len(data):
        raise ValueError(f"params: header says {total} bytes, file has {len(data)}")
    if count > (len(data) - HEADER.size) // 20:  # a record takes at least 20 bytes
        raise ValueError(f"params: tensor count {count} does not fit the file")
    r = _Reader(data)
    r.pos = HEADER.size
    records, data_end = [], 0
    for i in range(count):
        rec = _read_record(r, i, len(data), data_end)
        data_end = rec[3] + rec[4]
        records.append(rec)
    out: dict[str, np.ndarray] = {}
    for name, dtype, shape, offset, size in records:
        if size and offset < r.pos:
            raise ValueError(f"params: tensor {name!r} data overlaps the table")
        if name in out:
            raise ValueError(f"params: tensor name {name!r} appears twice")
        buf = np.frombuffer(data, dtype=dtype, count=size // dtype.itemsize, offset=offset)
        out[name] = buf.reshape(shape).astype(dtype.newbyteorder("="), copy=True)
    return out


__all__ = ["DTYPE_CODES", "write_params", "read_params"]
