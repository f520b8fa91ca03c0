#!/usr/bin/python3
"""TensorFlow tensor bundles (a checkpoint's `PREFIX.index` and `PREFIX.data-NNNNN-of-NNNNN`),
written and read from the format's description alone: an implementation independent of
mpickpt's C reader (lib/), so that the tests of `mpickpt import-tf` and `mpickpt export --format
tf` compare two readings of the format, not one reading with itself. See docs/interop.md, "Testing against the TensorFlow format".

The pieces, each checked against known vectors by selftest():
- CRC-32C (Castagnoli, table driven) and TensorFlow's / LevelDB's masked CRC;
- protobuf wire encoding, by hand (BundleHeaderProto, BundleEntryProto, TensorShapeProto,
  TensorSliceProto), proto3: zero scalars left out, a present message always written;
- OrderedCode (the keys of sliced tensors' slices);
- the LevelDB table (SSTable) of the index: prefix-compressed data blocks with restart points,
  blocks stored raw or Snappy-compressed (Debian's libsnappy through ctypes), 5-byte block
  trailers with a masked CRC-32C, the metaindex and index blocks, the 48-byte footer;
- tensor data in shards, DT_STRING tensors in TensorFlow's layout.

Module use (tests/scripts/test_import_tf.py):
    b = write_bundle(prefix, {"w": np.arange(6.0).reshape(2, 3)}, shards=2,
                     compression="snappy", block_size=512,
                     slices={"w": [[(0, 1), None], [(1, 1), None]]})
    tensors, header = read_bundle(prefix)        # name -> numpy array (or Tensor for strings)
Hooks to make bad bundles: header=..., entry_hook=, pairs_hook=, stored_hook=, after writing
flip_byte() / truncate() at the offsets `b` reports (b.blocks, b.footer_offset, b.entries).

CLI (manual use):
    tfbundle.py selftest
    tfbundle.py write PREFIX [--tensors N] [--shards S] [--block-size B] [--restart R]
                      [--snappy] [--sliced] [--seed N]
    tfbundle.py read PREFIX [--values]           # what the index and the shards hold
    tfbundle.py blocks PREFIX                    # the index's blocks and footer
"""
from __future__ import annotations

import ctypes
import os
import struct
import sys
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

# ---- CRC-32C -------------------------------------------------------------------------------------


def _crc_table() -> List[int]:
    poly = 0x82F63B78  # Castagnoli, bit-reversed
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ poly if c & 1 else c >> 1
        table.append(c)
    return table


_CRC_TABLE = _crc_table()


def crc32c(data: bytes, crc: int = 0) -> int:
    """CRC-32C of data, continuing from crc (the CRC of what came before; 0 to start)."""
    t = _CRC_TABLE
    c = crc ^ 0xFFFFFFFF
    for b in bytes(data):
        c = t[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


MASK_DELTA = 0xA282EAD8


def mask(crc: int) -> int:
    """LevelDB's and TensorFlow's masked CRC: rotated right by 15 bits, plus a constant."""
    return (((crc >> 15) | (crc << 17)) + MASK_DELTA) & 0xFFFFFFFF


def unmask(m: int) -> int:
    rot = (m - MASK_DELTA) & 0xFFFFFFFF
    return ((rot >> 17) | (rot << 15)) & 0xFFFFFFFF


# ---- varints and fixed-width integers ------------------------------------------------------------


def varint(v: int) -> bytes:
    """Unsigned LEB128; a negative v is written as its 64-bit two's complement (10 bytes), as
    protobuf writes a negative int32/int64."""
    if v < 0:
        v &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def read_varint(buf: bytes, pos: int, limit: Optional[int] = None, max_bytes: int = 10
                ) -> Tuple[int, int]:
    """(value, next position); ValueError when truncated or longer than max_bytes."""
    end = len(buf) if limit is None else limit
    v = shift = 0
    for i in range(max_bytes):
        if pos + i >= end:
            raise ValueError(f"truncated varint at {pos}")
        b = buf[pos + i]
        v |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return v, pos + i + 1
    raise ValueError(f"varint longer than {max_bytes} bytes at {pos}")


def fixed32(v: int) -> bytes:
    return struct.pack("<I", v & 0xFFFFFFFF)


def fixed64(v: int) -> bytes:
    return struct.pack("<Q", v & 0xFFFFFFFFFFFFFFFF)


def signed64(v: int) -> int:
    v &= (1 << 64) - 1
    return v - (1 << 64) if v >> 63 else v


def int32(v: int) -> int:
    """An int32 or enum field's value as protobuf parsers give it: the varint's low 32 bits,
    signed (a varint of 2^32 + 3 is 3)."""
    v &= 0xFFFFFFFF
    return v - (1 << 32) if v >> 31 else v


# ---- protobuf, by hand ---------------------------------------------------------------------------
# Wire types: 0 varint, 1 fixed64, 2 length-delimited, 5 fixed32.


def _tag(fieldno: int, wire: int) -> bytes:
    return varint(fieldno << 3 | wire)


def pb_varint(fieldno: int, v: int, always: bool = False) -> bytes:
    """A varint field; proto3 leaves a zero out unless `always` (a oneof member that is set)."""
    if v == 0 and not always:
        return b""
    return _tag(fieldno, 0) + varint(v)


def pb_bytes(fieldno: int, data: bytes) -> bytes:
    return _tag(fieldno, 2) + varint(len(data)) + data


def pb_fixed32(fieldno: int, v: int, always: bool = False) -> bytes:
    if v == 0 and not always:
        return b""
    return _tag(fieldno, 5) + fixed32(v)


def pb_parse(buf: bytes) -> List[Tuple[int, int, Any]]:
    """[(field, wire type, value)]: ints for varint/fixed, bytes for length-delimited."""
    out = []
    pos = 0
    while pos < len(buf):
        key, pos = read_varint(buf, pos)
        fieldno, wire = key >> 3, key & 7
        if fieldno == 0:
            raise ValueError("field number 0")
        if wire == 0:
            v, pos = read_varint(buf, pos)
        elif wire == 1:
            if pos + 8 > len(buf):
                raise ValueError("truncated fixed64")
            v = struct.unpack_from("<Q", buf, pos)[0]
            pos += 8
        elif wire == 2:
            n, pos = read_varint(buf, pos)
            if pos + n > len(buf):
                raise ValueError("truncated length-delimited field")
            v = bytes(buf[pos:pos + n])
            pos += n
        elif wire == 5:
            if pos + 4 > len(buf):
                raise ValueError("truncated fixed32")
            v = struct.unpack_from("<I", buf, pos)[0]
            pos += 4
        else:
            raise ValueError(f"wire type {wire}")
        out.append((fieldno, wire, v))
    return out


# DataType values (tensorflow/core/framework/types.proto)
DT = {
    "DT_INVALID": 0, "DT_FLOAT": 1, "DT_DOUBLE": 2, "DT_INT32": 3, "DT_UINT8": 4, "DT_INT16": 5,
    "DT_INT8": 6, "DT_STRING": 7, "DT_COMPLEX64": 8, "DT_INT64": 9, "DT_BOOL": 10,
    "DT_BFLOAT16": 14, "DT_UINT16": 17, "DT_COMPLEX128": 18, "DT_HALF": 19, "DT_UINT32": 22,
    "DT_UINT64": 23,
}
DT_NAME = {v: k for k, v in DT.items()}
# NumPy dtype -> DataType (bfloat16 is uint16 with a flag: Tensor(..., dtype="bfloat16"))
NUMPY_DT = {
    np.dtype(np.float32): 1, np.dtype(np.float64): 2, np.dtype(np.int32): 3,
    np.dtype(np.uint8): 4, np.dtype(np.int16): 5, np.dtype(np.int8): 6,
    np.dtype(np.complex64): 8, np.dtype(np.int64): 9, np.dtype(np.bool_): 10,
    np.dtype(np.uint16): 17, np.dtype(np.complex128): 18, np.dtype(np.float16): 19,
    np.dtype(np.uint32): 22, np.dtype(np.uint64): 23,
}
DT_NUMPY = {v: k for k, v in NUMPY_DT.items()}
DT_NUMPY[14] = np.dtype(np.uint16)  # bfloat16's bits
# mpickpt's dtype names (`mpickpt inspect --json`) of the DataTypes it has
DT_MPICKPT = {1: "float32", 2: "float64", 3: "int32", 4: "uint8", 5: "int16", 6: "int8",
              9: "int64", 10: "bool", 14: "bfloat16", 17: "uint16", 19: "float16",
              22: "uint32", 23: "uint64"}

ENDIAN_LITTLE, ENDIAN_BIG = 0, 1


def encode_shape(dims: Optional[Sequence[int]], unknown_rank: bool = False) -> bytes:
    """TensorShapeProto {repeated Dim dim = 2 {int64 size = 1; string name = 2};
    bool unknown_rank = 3}."""
    out = b""
    for d in dims or ():
        out += pb_bytes(2, pb_varint(1, int(d)))
    out += pb_varint(3, 1 if unknown_rank else 0)
    return out


# A slice spec: per dimension None (the full dimension) or (start, length).
Extent = Optional[Tuple[int, int]]


def encode_slice(extents: Sequence[Extent]) -> bytes:
    """TensorSliceProto {repeated Extent extent = 1 {int64 start = 1; oneof has_length
    {int64 length = 2}}}: a full dimension is an empty extent."""
    out = b""
    for e in extents:
        body = b""
        if e is not None:
            body = pb_varint(1, e[0]) + pb_varint(2, e[1], always=True)
        out += pb_bytes(1, body)
    return out


def encode_entry(dtype: int, shape: Optional[Sequence[int]], shard_id: int = 0, offset: int = 0,
                 size: int = 0, crc32c: int = 0, slices: Sequence[Sequence[Extent]] = (),
                 unknown_rank: bool = False, extra: bytes = b"") -> bytes:
    """BundleEntryProto {DataType dtype = 1; TensorShapeProto shape = 2; int32 shard_id = 3;
    int64 offset = 4; int64 size = 5; fixed32 crc32c = 6; repeated TensorSliceProto slices = 7}.
    The shape is always written (a scalar's is `12 00`); `crc32c` is the masked CRC."""
    out = pb_varint(1, dtype)
    out += pb_bytes(2, encode_shape(shape, unknown_rank))
    out += pb_varint(3, shard_id) + pb_varint(4, offset) + pb_varint(5, size)
    out += pb_fixed32(6, crc32c)
    for s in slices:
        out += pb_bytes(7, encode_slice(s))
    return out + extra


def encode_header(num_shards: int, endianness: int = ENDIAN_LITTLE, producer: int = 1,
                  min_consumer: int = 0, bad_consumers: Sequence[int] = ()) -> bytes:
    """BundleHeaderProto {int32 num_shards = 1; Endianness endianness = 2; VersionDef version = 3
    {int32 producer = 1; int32 min_consumer = 2; repeated int32 bad_consumers = 3}}."""
    version = pb_varint(1, producer) + pb_varint(2, min_consumer)
    for b in bad_consumers:
        version += pb_varint(3, b, always=True)
    return pb_varint(1, num_shards) + pb_varint(2, endianness) + pb_bytes(3, version)


def _dims_of(shape_msg: bytes) -> Tuple[List[int], bool]:
    dims, unknown = [], False
    for f, w, v in pb_parse(shape_msg):
        if f == 2 and w == 2:
            size = 0
            for f2, w2, v2 in pb_parse(v):
                if f2 == 1 and w2 == 0:
                    size = signed64(v2)
            dims.append(size)
        elif f == 3 and w == 0:
            unknown = bool(v)  # protobuf: any nonzero varint is true
    return dims, unknown


def decode_slice(msg: bytes) -> List[Extent]:
    extents: List[Extent] = []
    for f, w, v in pb_parse(msg):
        if f != 1 or w != 2:
            continue
        start, length = 0, None
        for f2, w2, v2 in pb_parse(v):
            if f2 == 1 and w2 == 0:
                start = signed64(v2)
            elif f2 == 2 and w2 == 0:
                length = signed64(v2)
        extents.append(None if length is None else (start, length))
    return extents


def decode_entry(value: bytes) -> Dict[str, Any]:
    e: Dict[str, Any] = {"dtype": 0, "shape": [], "unknown_rank": False, "shard_id": 0,
                         "offset": 0, "size": 0, "crc32c": 0, "slices": [], "has_shape": False}
    for f, w, v in pb_parse(value):
        if f == 1 and w == 0:
            e["dtype"] = int32(v)
        elif f == 2 and w == 2:
            e["shape"], e["unknown_rank"] = _dims_of(v)
            e["has_shape"] = True
        elif f == 3 and w == 0:
            e["shard_id"] = int32(v)
        elif f == 4 and w == 0:
            e["offset"] = signed64(v)
        elif f == 5 and w == 0:
            e["size"] = signed64(v)
        elif f == 6 and w == 5:
            e["crc32c"] = v
        elif f == 7 and w == 2:
            e["slices"].append(decode_slice(v))
    return e


def decode_header(value: bytes) -> Dict[str, Any]:
    h: Dict[str, Any] = {"num_shards": 0, "endianness": 0, "producer": 0, "min_consumer": 0,
                         "bad_consumers": []}
    for f, w, v in pb_parse(value):
        if f == 1 and w == 0:
            h["num_shards"] = int32(v)
        elif f == 2 and w == 0:
            h["endianness"] = int32(v)
        elif f == 3 and w == 2:
            for f2, w2, v2 in pb_parse(v):
                if f2 == 1 and w2 == 0:
                    h["producer"] = int32(v2)
                elif f2 == 2 and w2 == 0:
                    h["min_consumer"] = int32(v2)
                elif f2 == 3 and w2 == 0:
                    h["bad_consumers"].append(int32(v2))
    return h


# ---- OrderedCode (tensorflow/core/lib/strings/ordered_code.cc, from its description) ------------


def write_num_increasing(v: int) -> bytes:
    """A length byte n, then v big-endian in n bytes (no leading zero bytes; 0 -> b'\\x00')."""
    if v < 0:
        raise ValueError("WriteNumIncreasing takes an unsigned number")
    n = (v.bit_length() + 7) // 8
    return bytes([n]) + v.to_bytes(n, "big")


def read_num_increasing(buf: bytes, pos: int) -> Tuple[int, int]:
    n = buf[pos]
    if n > 8 or pos + 1 + n > len(buf):
        raise ValueError("bad WriteNumIncreasing encoding")
    return int.from_bytes(buf[pos + 1:pos + 1 + n], "big"), pos + 1 + n


def write_string(s: bytes) -> bytes:
    """0x00 -> 00 ff, 0xff -> ff 00, then the terminator 00 01."""
    return _escape(bytes(s)) + b"\x00\x01"


def _escape(s: bytes) -> bytes:
    out = bytearray()
    for b in s:
        if b == 0x00:
            out += b"\x00\xff"
        elif b == 0xFF:
            out += b"\xff\x00"
        else:
            out.append(b)
    return bytes(out)


def read_string(buf: bytes, pos: int) -> Tuple[bytes, int]:
    out = bytearray()
    while pos + 1 < len(buf):
        b = buf[pos]
        if b == 0x00:
            nxt = buf[pos + 1]
            if nxt == 0x01:
                return bytes(out), pos + 2
            if nxt != 0xFF:
                raise ValueError("bad escape 00 %02x" % nxt)
            out.append(0)
            pos += 2
        elif b == 0xFF:
            if buf[pos + 1] != 0x00:
                raise ValueError("bad escape ff %02x" % buf[pos + 1])
            out.append(0xFF)
            pos += 2
        else:
            out.append(b)
            pos += 1
    raise ValueError("unterminated OrderedCode string")


def write_signed_num_increasing(v: int) -> bytes:
    """n bytes hold [-2^(7n-1), 2^(7n-1)): the first bit is the sign (1: >= 0), the next n-1
    bits repeat it (the count of bytes after the first), then one bit of the opposite value, then
    the value's bits (two's complement when negative), big-endian. Equivalently: the value's
    8n-bit two's complement with its top n bits inverted (they are all sign bits there)."""
    if not -(1 << 63) <= v < (1 << 63):
        raise ValueError("not an int64")
    n = 1
    while not -(1 << (7 * n - 1)) <= v < (1 << (7 * n - 1)):
        n += 1
    bits = 8 * n
    x = (v & ((1 << bits) - 1)) ^ (((1 << n) - 1) << (bits - n))
    return x.to_bytes(n, "big")


def read_signed_num_increasing(buf: bytes, pos: int) -> Tuple[int, int]:
    if pos >= len(buf):
        raise ValueError("truncated signed number")
    sign = buf[pos] >> 7
    # n = 1 + the count of bits after the sign bit equal to it (at most 9)
    n = 1
    bitpos = 1
    while n < 10:
        byte = pos + bitpos // 8
        if byte >= len(buf):
            raise ValueError("truncated signed number")
        bit = buf[byte] >> (7 - bitpos % 8) & 1
        if bit != sign:
            break
        n += 1
        bitpos += 1
    if pos + n > len(buf):
        raise ValueError("truncated signed number")
    bits = 8 * n
    x = int.from_bytes(buf[pos:pos + n], "big") ^ (((1 << n) - 1) << (bits - n))
    if x >> (bits - 1):
        x -= 1 << bits
    return x, pos + n


def slice_key(name: Union[str, bytes], extents: Sequence[Extent]) -> bytes:
    """The key of one slice of a sliced tensor: WriteNumIncreasing(0) + WriteString(name) +
    WriteNumIncreasing(ndims) + per dimension WriteSignedNumIncreasing(start) and (length),
    a full dimension as start 0, length -1."""
    key = write_num_increasing(0) + write_string(_b(name)) + write_num_increasing(len(extents))
    for e in extents:
        start, length = (0, -1) if e is None else e
        key += write_signed_num_increasing(start) + write_signed_num_increasing(length)
    return key


def parse_slice_key(key: bytes) -> Tuple[bytes, List[Extent]]:
    zero, pos = read_num_increasing(key, 0)
    if zero != 0:
        raise ValueError("a slice key starts with WriteNumIncreasing(0)")
    name, pos = read_string(key, pos)
    ndims, pos = read_num_increasing(key, pos)
    extents: List[Extent] = []
    for _ in range(ndims):
        start, pos = read_signed_num_increasing(key, pos)
        length, pos = read_signed_num_increasing(key, pos)
        extents.append(None if length == -1 else (start, length))
    if pos != len(key):
        raise ValueError("trailing bytes after a slice key")
    return name, extents


def _b(name: Union[str, bytes]) -> bytes:
    return name.encode() if isinstance(name, str) else bytes(name)


# ---- Snappy (Debian's libsnappy, snappy-c.h) -----------------------------------------------------

_snappy = None


def _lib():
    global _snappy
    if _snappy is None:
        lib = ctypes.CDLL("libsnappy.so.1")
        lib.snappy_compress.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_char_p,
                                        ctypes.POINTER(ctypes.c_size_t)]
        lib.snappy_compress.restype = ctypes.c_int
        lib.snappy_uncompress.argtypes = lib.snappy_compress.argtypes
        lib.snappy_uncompress.restype = ctypes.c_int
        lib.snappy_max_compressed_length.argtypes = [ctypes.c_size_t]
        lib.snappy_max_compressed_length.restype = ctypes.c_size_t
        lib.snappy_uncompressed_length.argtypes = [ctypes.c_char_p, ctypes.c_size_t,
                                                   ctypes.POINTER(ctypes.c_size_t)]
        lib.snappy_uncompressed_length.restype = ctypes.c_int
        _snappy = lib
    return _snappy


def snappy_compress(data: bytes) -> bytes:
    lib = _lib()
    n = ctypes.c_size_t(lib.snappy_max_compressed_length(len(data)))
    out = ctypes.create_string_buffer(n.value)
    if lib.snappy_compress(bytes(data), len(data), out, ctypes.byref(n)) != 0:
        raise RuntimeError("snappy_compress failed")
    return out.raw[:n.value]


def snappy_uncompress(data: bytes) -> bytes:
    lib = _lib()
    n = ctypes.c_size_t(0)
    if lib.snappy_uncompressed_length(bytes(data), len(data), ctypes.byref(n)) != 0:
        raise ValueError("bad Snappy data (length)")
    if n.value > 1 << 30:
        raise ValueError("Snappy data claims %d bytes" % n.value)
    out = ctypes.create_string_buffer(max(n.value, 1))
    if lib.snappy_uncompress(bytes(data), len(data), out, ctypes.byref(n)) != 0:
        raise ValueError("bad Snappy data")
    return out.raw[:n.value]


# ---- the LevelDB table (SSTable) -----------------------------------------------------------------

MAGIC = 0xDB4775248B80FB57
FOOTER_LEN = 48
TYPE_NONE, TYPE_SNAPPY = 0, 1


class BlockBuilder:
    """Prefix-compressed entries, a restart point (shared = 0) every `restart_interval`."""

    def __init__(self, restart_interval: int) -> None:
        self.interval = restart_interval
        self.buf = bytearray()
        self.restarts = [0]
        self.counter = 0
        self.last = b""
        self.entries = 0

    def add(self, key: bytes, value: bytes) -> None:
        shared = 0
        if self.counter < self.interval:
            limit = min(len(self.last), len(key))
            while shared < limit and self.last[shared] == key[shared]:
                shared += 1
        else:
            self.restarts.append(len(self.buf))
            self.counter = 0
        self.buf += varint(shared) + varint(len(key) - shared) + varint(len(value))
        self.buf += key[shared:] + value
        self.last = key
        self.counter += 1
        self.entries += 1

    def size_estimate(self) -> int:
        return len(self.buf) + 4 * len(self.restarts) + 4

    def finish(self) -> bytes:
        return bytes(self.buf) + b"".join(fixed32(r) for r in self.restarts) + \
            fixed32(len(self.restarts))


def shortest_separator(start: bytes, limit: bytes) -> bytes:
    """A short key k with start <= k < limit (LevelDB's bytewise FindShortestSeparator)."""
    n = min(len(start), len(limit))
    i = 0
    while i < n and start[i] == limit[i]:
        i += 1
    if i >= n:
        return start  # one is a prefix of the other
    b = start[i]
    if b < 0xFF and b + 1 < limit[i]:
        return start[:i] + bytes([b + 1])
    return start


def short_successor(key: bytes) -> bytes:
    """A short key >= key (LevelDB's FindShortSuccessor)."""
    for i, b in enumerate(key):
        if b != 0xFF:
            return key[:i] + bytes([b + 1])
    return key


def encode_handle(offset: int, size: int) -> bytes:
    return varint(offset) + varint(size)


@dataclass
class Block:
    kind: str          # "data", "metaindex", "index"
    offset: int        # of the stored contents in the file
    size: int          # stored contents, without the 5-byte trailer
    type: int          # 0 none, 1 Snappy
    raw_size: int      # the block before compression
    first_key: bytes = b""
    last_key: bytes = b""
    entries: int = 0


StoredHook = Callable[[str, int, bytes, int], Tuple[bytes, int]]


def build_table(pairs: Sequence[Tuple[bytes, bytes]], block_size: int = 262144,
                restart_interval: int = 16, compression: Optional[str] = None,
                stored_hook: Optional[StoredHook] = None,
                index_key: Optional[Callable[[int, bytes, Optional[bytes]], bytes]] = None
                ) -> Tuple[bytes, List[Block], int]:
    """The table of `pairs`, written in the order given (sorting is the caller's: a test may
    hand unsorted keys). Returns (file bytes, blocks, footer offset).
    stored_hook(kind, i, stored, type) -> (stored, type) replaces a block's stored contents
    before its trailer CRC is computed (e.g. bad Snappy data with a correct CRC).
    index_key(i, last_key, next_first_key or None) -> the index block's key of data block i."""
    out = bytearray()
    blocks: List[Block] = []
    counters = {"data": 0, "metaindex": 0, "index": 0}

    def write_block(kind: str, builder: BlockBuilder, first: bytes = b"") -> Block:
        raw = builder.finish()
        stored, btype = raw, TYPE_NONE
        if compression == "snappy":
            c = snappy_compress(raw)
            if len(c) < len(raw) - len(raw) // 8:  # saves at least 1/8
                stored, btype = c, TYPE_SNAPPY
        elif compression is not None:
            raise ValueError(f"compression {compression!r}")
        if stored_hook is not None:
            stored, btype = stored_hook(kind, counters[kind], stored, btype)
        counters[kind] += 1
        blk = Block(kind, len(out), len(stored), btype, len(raw), first, builder.last,
                    builder.entries)
        out.extend(stored)
        out.append(btype)
        out.extend(fixed32(mask(crc32c(bytes([btype]), crc32c(stored)))))
        blocks.append(blk)
        return blk

    index = BlockBuilder(1)
    data = BlockBuilder(restart_interval)
    first = b""
    pending: Optional[Block] = None
    ndata = 0
    for key, value in pairs:
        if pending is not None:
            sep = (index_key(ndata - 1, pending.last_key, key) if index_key
                   else shortest_separator(pending.last_key, key))
            index.add(sep, encode_handle(pending.offset, pending.size))
            pending = None
        if data.entries == 0:
            first = key
        data.add(key, value)
        if data.size_estimate() >= block_size:
            pending = write_block("data", data, first)
            ndata += 1
            data = BlockBuilder(restart_interval)
    if data.entries:
        pending = write_block("data", data, first)
        ndata += 1
    meta = write_block("metaindex", BlockBuilder(restart_interval))
    if pending is not None:
        sep = (index_key(ndata - 1, pending.last_key, None) if index_key
               else short_successor(pending.last_key))
        index.add(sep, encode_handle(pending.offset, pending.size))
    idx = write_block("index", index)
    footer_offset = len(out)
    footer = encode_handle(meta.offset, meta.size) + encode_handle(idx.offset, idx.size)
    out += footer + b"\x00" * (40 - len(footer)) + fixed64(MAGIC)
    return bytes(out), blocks, footer_offset


class FormatError(ValueError):
    """The reader's complaint: what is wrong and where (file, block, key)."""


def _read_block(data: bytes, offset: int, size: int, what: str) -> bytes:
    if offset < 0 or size < 0 or offset + size + 5 > len(data):
        raise FormatError(f"{what}: [{offset}, {offset + size}) + trailer beyond the file "
                          f"({len(data)} bytes)")
    stored = data[offset:offset + size]
    btype = data[offset + size]
    want = struct.unpack_from("<I", data, offset + size + 1)[0]
    if mask(crc32c(bytes([btype]), crc32c(stored))) != want:
        raise FormatError(f"{what}: block checksum mismatch")
    if btype == TYPE_NONE:
        return stored
    if btype == TYPE_SNAPPY:
        try:
            return snappy_uncompress(stored)
        except ValueError as e:
            raise FormatError(f"{what}: {e}") from None
    raise FormatError(f"{what}: unknown block type {btype}")


def parse_block(contents: bytes, what: str) -> List[Tuple[bytes, bytes]]:
    """The entries of a block, every restart point checked (shared == 0 there)."""
    if len(contents) < 4:
        raise FormatError(f"{what}: {len(contents)} bytes, too short for a block")
    nrestarts = struct.unpack_from("<I", contents, len(contents) - 4)[0]
    if nrestarts == 0 or 4 * (nrestarts + 1) > len(contents):
        raise FormatError(f"{what}: {nrestarts} restart points do not fit")
    limit = len(contents) - 4 * (nrestarts + 1)
    restarts = struct.unpack_from(f"<{nrestarts}I", contents, limit)
    if restarts[0] != 0 or any(r >= limit for r in restarts if r or limit):
        raise FormatError(f"{what}: bad restart offsets {restarts[:8]}")
    rset = set(restarts)
    out = []
    starts = set()
    pos, last = 0, b""
    try:
        while pos < limit:
            at = pos
            shared, pos = read_varint(contents, pos, limit, 5)
            nonshared, pos = read_varint(contents, pos, limit, 5)
            vlen, pos = read_varint(contents, pos, limit, 5)
            if at in rset and shared:
                raise FormatError(f"{what}: restart point at {at} shares {shared} bytes")
            if shared > len(last) or pos + nonshared + vlen > limit:
                raise FormatError(f"{what}: entry at {at} runs past the block")
            key = last[:shared] + contents[pos:pos + nonshared]
            pos += nonshared
            out.append((bytes(key), bytes(contents[pos:pos + vlen])))
            pos += vlen
            last = key
            starts.add(at)
    except ValueError as e:
        if isinstance(e, FormatError):
            raise
        raise FormatError(f"{what}: {e}") from None
    if limit and not rset <= starts:
        raise FormatError(f"{what}: restart offsets {sorted(rset - starts)[:4]} are not entries")
    return out


def read_table(data: bytes, path: str = "index", strict: bool = True
               ) -> Tuple[List[Tuple[bytes, bytes]], List[Block]]:
    """Every (key, value) of a table, in file order, and its blocks. strict: keys must increase,
    each data block's keys must be <= its index key and > the previous one."""
    if len(data) < FOOTER_LEN:
        raise FormatError(f"{path}: {len(data)} bytes, shorter than the 48-byte footer")
    foot = data[len(data) - FOOTER_LEN:]
    if struct.unpack_from("<Q", foot, 40)[0] != MAGIC:
        raise FormatError(f"{path}: bad magic number in the footer")
    try:
        moff, p = read_varint(foot, 0, 40)
        msize, p = read_varint(foot, p, 40)
        ioff, p = read_varint(foot, p, 40)
        isize, p = read_varint(foot, p, 40)
    except ValueError as e:
        raise FormatError(f"{path}: footer: {e}") from None
    body = data[:len(data) - FOOTER_LEN]
    blocks = [Block("metaindex", moff, msize, 0, 0), Block("index", ioff, isize, 0, 0)]
    _read_block(body, moff, msize, f"{path}: metaindex block")
    index = parse_block(_read_block(body, ioff, isize, f"{path}: index block"),
                        f"{path}: index block")
    pairs: List[Tuple[bytes, bytes]] = []
    prev_sep = None
    for i, (sep, handle) in enumerate(index):
        try:
            off, p = read_varint(handle, 0)
            size, p = read_varint(handle, p)
        except ValueError as e:
            raise FormatError(f"{path}: index entry {i}: {e}") from None
        what = f"{path}: data block {i} at offset {off}"
        entries = parse_block(_read_block(body, off, size, what), what)
        blocks.append(Block("data", off, size, body[off + size], 0,
                            entries[0][0] if entries else b"", entries[-1][0] if entries else b"",
                            len(entries)))
        if strict:
            if entries and (entries[-1][0] > sep or (prev_sep is not None and
                                                     entries[0][0] <= prev_sep)):
                raise FormatError(f"{what}: keys outside the index's range")
            prev_sep = sep
        pairs.extend(entries)
    if strict:
        for (a, _), (b, _) in zip(pairs, pairs[1:]):
            if b <= a:
                raise FormatError(f"{path}: keys not in order: {b!r} after {a!r}")
    for blk in blocks[:2]:
        blk.type = body[blk.offset + blk.size] if blk.offset + blk.size < len(body) else 0
    return pairs, blocks


# ---- bundles -------------------------------------------------------------------------------------


@dataclass
class Tensor:
    """A tensor to write, when a bare NumPy array does not say it all: `dtype` "bfloat16"
    (value: the uint16 bits), "string" (value: a list of bytes, shape given), or a DataType
    number (24: unknown; 8: complex64 ...) whose bytes are value's bytes."""
    value: Any
    dtype: Union[None, str, int] = None
    shape: Optional[Sequence[int]] = None

    def dt(self) -> int:
        if isinstance(self.dtype, int):
            return self.dtype
        if self.dtype == "bfloat16":
            return DT["DT_BFLOAT16"]
        if self.dtype == "string":
            return DT["DT_STRING"]
        if self.dtype is not None:
            return DT[self.dtype]
        return NUMPY_DT[np.asarray(self.value).dtype]

    def dims(self) -> List[int]:
        if self.shape is not None:
            return [int(d) for d in self.shape]
        return list(np.asarray(self.value).shape)


def _as_tensor(v: Any) -> Tensor:
    if isinstance(v, Tensor):
        return v
    a = np.asarray(v)
    if a.dtype not in NUMPY_DT:
        raise ValueError(f"dtype {a.dtype} has no DataType here")
    return Tensor(a)


def string_bytes(values: Sequence[bytes]) -> Tuple[bytes, int]:
    """A DT_STRING tensor's stored bytes and its masked CRC: varint64 lengths, the masked CRC of
    the lengths (each as a uint32 LE), the strings; the entry's CRC runs over the lengths (as
    uint32), those 4 bytes, and the strings."""
    lengths = b"".join(varint(len(s)) for s in values)
    crc = 0
    for s in values:
        crc = crc32c(fixed32(len(s)), crc)
    lcrc = fixed32(mask(crc))
    crc = crc32c(lcrc, crc)
    body = b"".join(bytes(s) for s in values)
    crc = crc32c(body, crc)
    return lengths + lcrc + body, mask(crc)


def _cut(a: np.ndarray, extents: Sequence[Extent]) -> np.ndarray:
    idx = tuple(slice(None) if e is None else slice(e[0], e[0] + e[1]) for e in extents)
    return np.ascontiguousarray(a[idx])


def tensor_bytes(t: Tensor) -> bytes:
    if t.dtype == "string":
        return string_bytes(t.value)[0]
    a = np.asarray(t.value)
    if a.dtype.byteorder == ">":
        a = a.astype(a.dtype.newbyteorder("<"))
    return np.ascontiguousarray(a).tobytes()


@dataclass
class Bundle:
    """What write_bundle wrote: paths, the header, every entry as encoded (key -> fields, data
    entries with shard_id/offset/size/crc32c), the index's blocks and its footer's offset."""
    prefix: str
    index_path: str
    data_paths: List[str]
    header: Dict[str, Any]
    entries: Dict[bytes, Dict[str, Any]] = field(default_factory=dict)
    blocks: List[Block] = field(default_factory=list)
    footer_offset: int = 0
    index_size: int = 0

    def data_entry(self, key: Union[str, bytes]) -> Tuple[str, int, int]:
        """(shard path, offset, size) of a data entry (a tensor, or a slice by its key)."""
        e = self.entries[_b(key)]
        return self.data_paths[e["shard_id"]], e["offset"], e["size"]

    def data_blocks(self) -> List[Block]:
        return [b for b in self.blocks if b.kind == "data"]

    def block(self, kind: str) -> Block:
        return next(b for b in self.blocks if b.kind == kind)


EntryHook = Callable[[bytes, Dict[str, Any]], Optional[Dict[str, Any]]]
PairsHook = Callable[[List[Tuple[bytes, bytes]]], List[Tuple[bytes, bytes]]]


def data_name(prefix: str, shard: int, shards: int) -> str:
    return "%s.data-%05d-of-%05d" % (prefix, shard, shards)


def write_bundle(prefix: str, tensors: Dict[Union[str, bytes], Any], shards: int = 1,
                 block_size: int = 262144, restart_interval: int = 16,
                 compression: Optional[str] = None,
                 slices: Optional[Dict[Union[str, bytes], Sequence[Sequence[Extent]]]] = None,
                 header: Optional[Dict[str, Any]] = None,
                 entry_hook: Optional[EntryHook] = None,
                 pairs_hook: Optional[PairsHook] = None,
                 stored_hook: Optional[StoredHook] = None,
                 index_key: Optional[Callable[[int, bytes, Optional[bytes]], bytes]] = None,
                 shard_of: Optional[Callable[[int, bytes], int]] = None,
                 align: int = 1) -> Bundle:
    """Writes PREFIX.index and PREFIX.data-0000i-of-SHARDS. `tensors`: name (str or bytes) ->
    NumPy array or Tensor. `slices`: name -> the slices to store instead of the whole tensor,
    each a list of extents (None: the full dimension; (start, length)). Data entries go to shard
    i % shards in key order (or shard_of(i, key)); each shard is the entries' bytes back to back.
    Hooks, for bad bundles: header (fields of encode_header, e.g. {"num_shards": 5}),
    entry_hook(key, fields) -> fields (None: drop the entry) before encoding, pairs_hook(pairs)
    -> pairs (sorted (key, value) list, header first) before the table is built, stored_hook and
    index_key (build_table). align: a data entry of at least `align` bytes starts at a multiple of
    it, zeros before it (BundleWriter's data_alignment option)."""
    slices = {_b(k): v for k, v in (slices or {}).items()}
    items: Dict[bytes, Tensor] = {_b(k): _as_tensor(v) for k, v in tensors.items()}
    # (key, fields, data bytes or None)
    records: List[Tuple[bytes, Dict[str, Any], Optional[bytes]]] = []
    for key, t in items.items():
        dims = t.dims()
        if key in slices:
            specs = [list(s) for s in slices[key]]
            records.append((key, {"dtype": t.dt(), "shape": dims, "slices": specs}, None))
            for spec in specs:
                piece = _cut(np.asarray(t.value), spec)
                raw = tensor_bytes(Tensor(piece, t.dtype))
                records.append((slice_key(key, spec),
                                {"dtype": t.dt(), "shape": list(piece.shape)}, raw))
        else:
            if t.dtype == "string":
                raw, crc = string_bytes(t.value)
                records.append((key, {"dtype": t.dt(), "shape": dims, "crc32c": crc}, raw))
            else:
                records.append((key, {"dtype": t.dt(), "shape": dims}, tensor_bytes(t)))
    records.sort(key=lambda r: r[0])
    if len({r[0] for r in records}) != len(records):
        raise ValueError("two entries have the same key")
    bufs = [bytearray() for _ in range(shards)]
    ndata = 0
    for key, fields, raw in records:
        if raw is None:
            continue
        s = shard_of(ndata, key) if shard_of else ndata % shards
        ndata += 1
        if align > 1 and len(raw) >= align:  # TensorFlow's data_alignment: pad before
            bufs[s] += b"\x00" * (-len(bufs[s]) % align)
        fields.update(shard_id=s, offset=len(bufs[s]), size=len(raw))
        fields.setdefault("crc32c", mask(crc32c(raw)))
        bufs[s] += raw
    hdr = {"num_shards": shards, "endianness": ENDIAN_LITTLE, "producer": 1, "min_consumer": 0}
    hdr.update(header or {})
    pairs = [(b"", encode_header(**hdr))]
    b = Bundle(prefix, prefix + ".index", [data_name(prefix, i, shards) for i in range(shards)],
               hdr)
    for key, fields, raw in records:
        if entry_hook is not None:
            fields = entry_hook(key, dict(fields))
            if fields is None:
                continue
        b.entries[key] = fields
        pairs.append((key, encode_entry(**fields)))
    if pairs_hook is not None:
        pairs = pairs_hook(pairs)
    table, blocks, footer = build_table(pairs, block_size, restart_interval, compression,
                                        stored_hook, index_key)
    for i, buf in enumerate(bufs):
        with open(b.data_paths[i], "wb") as f:
            f.write(buf)
    with open(b.index_path, "wb") as f:
        f.write(table)
    b.blocks, b.footer_offset, b.index_size = blocks, footer, len(table)
    return b


def read_entries(prefix: str) -> Tuple[Dict[str, Any], List[Tuple[bytes, Dict[str, Any]]],
                                       List[Block]]:
    """(header, [(key, decoded entry)] in index order, blocks) of PREFIX.index."""
    with open(prefix + ".index", "rb") as f:
        data = f.read()
    pairs, blocks = read_table(data, prefix + ".index")
    if not pairs or pairs[0][0] != b"":
        raise FormatError(f"{prefix}.index: no header entry under the empty key")
    return decode_header(pairs[0][1]), [(k, decode_entry(v)) for k, v in pairs[1:]], blocks


def _read_strings(raw: bytes, n: int, key: bytes) -> List[bytes]:
    pos, lens = 0, []
    for _ in range(n):
        v, pos = read_varint(raw, pos)
        lens.append(v)
    pos += 4
    out = []
    for ln in lens:
        out.append(raw[pos:pos + ln])
        pos += ln
    if pos != len(raw):
        raise FormatError(f"{key!r}: string lengths do not add up")
    return out


def read_bundle(prefix: str, check_crc: bool = True) -> Tuple[Dict[bytes, Any], Dict[str, Any]]:
    """Every tensor of the bundle at prefix: key (bytes) -> NumPy array (bfloat16 as uint16 bits;
    DT_STRING: a Tensor of a list of bytes), sliced tensors assembled from their slices (which
    must tile them). Every block CRC and (check_crc) every tensor CRC checked; FormatError names
    what is wrong. Returns (tensors, header, with "dtypes": key -> DataType)."""
    header, entries, _ = read_entries(prefix)
    if header["endianness"] != ENDIAN_LITTLE:
        raise FormatError(f"{prefix}: big-endian bundle")
    n = header["num_shards"]
    shards = []
    for i in range(n):
        with open(data_name(prefix, i, n), "rb") as f:
            shards.append(f.read())
    by_key = dict(entries)
    out: Dict[bytes, Any] = {}
    dtypes: Dict[bytes, int] = {}

    def payload(key: bytes, e: Dict[str, Any]) -> bytes:
        if not 0 <= e["shard_id"] < n:
            raise FormatError(f"{key!r}: shard_id {e['shard_id']} of {n}")
        shard = shards[e["shard_id"]]
        if e["offset"] < 0 or e["size"] < 0 or e["offset"] + e["size"] > len(shard):
            raise FormatError(f"{key!r}: [{e['offset']}, +{e['size']}) beyond its shard")
        raw = shard[e["offset"]:e["offset"] + e["size"]]
        if check_crc and e["dtype"] != DT["DT_STRING"] and mask(crc32c(raw)) != e["crc32c"]:
            raise FormatError(f"{key!r}: data checksum mismatch")
        return raw

    def array(key: bytes, e: Dict[str, Any]) -> Any:
        raw = payload(key, e)
        count = int(np.prod(e["shape"], dtype=np.int64)) if e["shape"] else 1
        if e["dtype"] == DT["DT_STRING"]:
            if check_crc:
                strs = _read_strings(raw, count, key)
                if string_bytes(strs)[1] != e["crc32c"]:
                    raise FormatError(f"{key!r}: data checksum mismatch")
            return Tensor(_read_strings(raw, count, key), "string", e["shape"])
        dt = DT_NUMPY.get(e["dtype"])
        if dt is None:
            raise FormatError(f"{key!r}: dtype {e['dtype']}")
        if count * dt.itemsize != len(raw):
            raise FormatError(f"{key!r}: {len(raw)} bytes for {e['shape']} of {dt}")
        return np.frombuffer(raw, dtype=dt).reshape(e["shape"]).copy()

    for key, e in entries:
        if key.startswith(b"\x00"):
            continue  # a slice: read with its tensor
        dtypes[key] = e["dtype"]
        if not e["slices"]:
            out[key] = array(key, e)
            continue
        whole = np.zeros(e["shape"], dtype=DT_NUMPY[e["dtype"]])
        covered = np.zeros(e["shape"], dtype=np.int32)
        for spec in e["slices"]:
            if len(spec) != len(e["shape"]):
                raise FormatError(f"{key!r}: a slice of {len(spec)} dimensions")
            sk = slice_key(key, spec)
            if sk not in by_key:
                raise FormatError(f"{key!r}: slice {spec} missing")
            piece = array(sk, by_key[sk])
            idx = tuple(slice(None) if x is None else slice(x[0], x[0] + x[1]) for x in spec)
            if whole[idx].shape != piece.shape:
                raise FormatError(f"{key!r}: slice {spec} has shape {piece.shape}")
            whole[idx] = piece
            covered[idx] += 1
        if covered.size and (covered != 1).any():
            raise FormatError(f"{key!r}: slices overlap or leave gaps")
        out[key] = whole
    header["dtypes"] = dtypes
    return out, header


def write_checkpoint_file(directory: str, newest: str, all_paths: Sequence[str] = (),
                          timestamps: bool = True) -> str:
    """TensorFlow's `checkpoint` file (a CheckpointState in protobuf text format) naming `newest`
    as model_checkpoint_path; TensorFlow 2 adds the timestamps. Returns its path."""
    paths = list(all_paths) or [newest]
    lines = [f'model_checkpoint_path: "{newest}"']
    lines += [f'all_model_checkpoint_paths: "{p}"' for p in paths]
    if timestamps:
        lines += [f"all_model_checkpoint_timestamps: {1700000000.5 + i}"
                  for i in range(len(paths))]
        lines.append("last_preserved_timestamp: 1699999999.25")
    path = os.path.join(directory, "checkpoint")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return path


# ---- damage --------------------------------------------------------------------------------------


def flip_byte(path: str, offset: int, bits: int = 0xFF) -> None:
    """XORs the byte at offset (negative: from the end) with bits."""
    with open(path, "r+b") as f:
        f.seek(offset, 0 if offset >= 0 else 2)
        pos = f.tell()
        b = f.read(1)
        f.seek(pos)
        f.write(bytes([b[0] ^ bits]))


def truncate(path: str, size: int) -> None:
    with open(path, "r+b") as f:
        f.truncate(size)


def as_written(tensors: Dict[bytes, Any], header: Dict[str, Any]) -> Dict[bytes, Any]:
    """read_bundle's tensors as write_bundle takes them (bfloat16 bits marked as such)."""
    dts = header.get("dtypes", {})
    return {k: Tensor(v, "bfloat16") if dts.get(k) == DT["DT_BFLOAT16"] else v
            for k, v in tensors.items()}


# ---- against bundles TensorFlow wrote ---------------------------------------------------------------


def rewrite_check(prefix: str, tmpdir: str) -> List[str]:
    """Reads the bundle at prefix (every CRC checked) and writes it again from the values read,
    with its header fields, its entries' shards, offsets and sizes, and its index's compression:
    the index must come out byte for byte the same, and every entry's bytes equal the shard's at
    its offset. For a bundle TensorFlow wrote, this checks the generator against TensorFlow's
    own writer. Returns the differences."""
    fails: List[str] = []
    try:
        tensors, hdr = read_bundle(prefix)
        _, entries, blocks = read_entries(prefix)
    except (FormatError, OSError, ValueError) as e:
        return [f"{prefix}: {e}"]
    orig = dict(entries)

    def keep(key: bytes, f: Dict[str, Any]) -> Dict[str, Any]:
        o = orig[key]
        if "offset" in f:
            f.update(shard_id=o["shard_id"], offset=o["offset"], size=o["size"],
                     crc32c=o["crc32c"])
        return f

    snappy = any(b.type == TYPE_SNAPPY for b in blocks)
    slices = {k: e["slices"] for k, e in entries if e["slices"]}
    header = {k: hdr[k] for k in ("num_shards", "endianness", "producer", "min_consumer",
                                  "bad_consumers")}
    out = os.path.join(tmpdir, os.path.basename(prefix) + ".again")
    b = write_bundle(out, as_written(tensors, hdr), shards=max(1, hdr["num_shards"]),
                     slices=slices,
                     header=header, entry_hook=keep, compression="snappy" if snappy else None)
    with open(prefix + ".index", "rb") as f:
        want = f.read()
    with open(b.index_path, "rb") as f:
        got = f.read()
    if got != want:
        at = next((i for i, (x, y) in enumerate(zip(got, want)) if x != y), min(len(got),
                                                                                 len(want)))
        fails.append(f"{prefix}.index: written again it differs at byte {at} "
                     f"({len(got)} bytes, TensorFlow's {len(want)})")
    n = hdr["num_shards"]
    for i in range(n):
        with open(data_name(prefix, i, n), "rb") as f:
            shard = f.read()
        for key, e in entries:
            if not e["slices"] and e["shard_id"] == i and \
                    shard[e["offset"]:e["offset"] + e["size"]] != _entry_bytes(tensors, key):
                fails.append(f"{prefix}: {key!r}: the bytes written again differ")
    return fails


def _entry_bytes(tensors: Dict[bytes, Any], key: bytes) -> bytes:
    if key.startswith(b"\x00"):
        name, spec = parse_slice_key(key)
        return tensor_bytes(Tensor(_cut(tensors[name], spec)))
    v = tensors[key]
    return tensor_bytes(v if isinstance(v, Tensor) else Tensor(v))


# ---- self-test -----------------------------------------------------------------------------------


def selftest(tmpdir: Optional[str] = None, seed: int = 1) -> List[str]:
    """Known vectors and round trips; returns the failures (an empty list when all passed)."""
    import random
    import tempfile

    fails = []

    def expect(cond: bool, what: str) -> None:
        if not cond:
            fails.append(what)

    expect(crc32c(b"123456789") == 0xE3069283, "crc32c('123456789')")
    expect(crc32c(b"") == 0, "crc32c('')")
    expect(crc32c(b"\x00" * 32) == 0x8A9136AA, "crc32c(32 zeros)")  # RFC 3720 B.4
    expect(crc32c(b"\xff" * 32) == 0x62A8AB43, "crc32c(32 x ff)")
    expect(crc32c(bytes(range(32))) == 0x46DD794E, "crc32c(0..31)")
    expect(crc32c(b"56789", crc32c(b"1234")) == 0xE3069283, "crc32c continued")
    expect(all(unmask(mask(c)) == c for c in (0, 1, 0xE3069283, 0xFFFFFFFF)), "mask/unmask")
    expect(mask(0) == MASK_DELTA, "mask(0)")
    vectors = {0: "80", -1: "7f", 63: "bf", 64: "c040", -64: "40", -65: "3fbf",
               8191: "dfff", 8192: "e02000", -8193: "1fdfff"}
    for v, hx in vectors.items():
        got = write_signed_num_increasing(v).hex()
        expect(got == hx, f"WriteSignedNumIncreasing({v}) = {got}, expected {hx}")
    rng = random.Random(seed)
    values = [rng.randrange(-(1 << 63), 1 << 63) >> rng.randrange(64) for _ in range(3000)]
    values += [(1 << 63) - 1, -(1 << 63), (1 << 55) - 1, -(1 << 55), 1 << 55, -(1 << 55) - 1]
    for v in values:
        enc = write_signed_num_increasing(v)
        dec, end = read_signed_num_increasing(enc + b"\x42", 0)
        if dec != v or end != len(enc):
            fails.append(f"signed round trip of {v}: {enc.hex()} -> {dec}")
            break
    ordered = sorted(values)
    encs = [write_signed_num_increasing(v) for v in ordered]
    expect(all(a <= b for a, b in zip(encs, encs[1:])), "signed encoding keeps the order")
    expect(len(write_signed_num_increasing((1 << 63) - 1)) == 10, "int64 max takes 10 bytes")
    expect(write_num_increasing(0) == b"\x00" and write_num_increasing(0x1234) == b"\x02\x12\x34",
           "WriteNumIncreasing")
    expect(write_string(b"a\x00b\xffc") == b"a\x00\xffb\xff\x00c\x00\x01", "WriteString")
    k = slice_key("w\x00x", [(0, 2), None, (5, 3)])
    try:
        expect(parse_slice_key(k) == (b"w\x00x", [(0, 2), None, (5, 3)]), "slice key round trip")
    except ValueError as e:
        fails.append(f"slice key round trip: {e}")
    expect(k.startswith(b"\x00w\x00\xffx\x00\x01\x01\x03\x80\x82\x80\x7f\x85\x83"),
           "slice key bytes")
    expect(encode_entry(1, []) == b"\x08\x01\x12\x00", "a scalar float entry: 08 01 12 00")
    expect(decode_entry(b"\x08" + varint((1 << 32) + 3) + b"\x12\x00")["dtype"] == 3 and
           decode_entry(encode_entry(-1, [], shard_id=-2))["shard_id"] == -2,
           "int32 and enum fields keep a varint's low 32 bits, as protobuf does")
    expect(encode_slice([None, (2, 0)]) == b"\x0a\x00\x0a\x04\x08\x02\x10\x00", "slice proto")
    expect(decode_slice(encode_slice([None, (0, 3), (-1, 2)])) == [None, (0, 3), (-1, 2)],
           "slice proto round trip")
    expect(shortest_separator(b"abcd", b"abzz") == b"abd", "separator")
    expect(shortest_separator(b"ab", b"abc") == b"ab", "separator of a prefix")
    expect(shortest_separator(b"abx", b"ac") == b"abx", "separator of neighbours")
    expect(short_successor(b"\xff\xffa") == b"\xff\xffb", "successor")
    c = snappy_compress(b"x" * 1000)
    expect(len(c) < 100 and snappy_uncompress(c) == b"x" * 1000, "snappy round trip")
    # tables and bundles: every knob, read back by read_bundle
    own = tmpdir is None
    d = tempfile.mkdtemp(prefix="tfbundle-") if own else tmpdir
    try:
        r = np.random.default_rng(seed)
        tensors: Dict[Union[str, bytes], Any] = {
            f"v/{i:04d}/.ATTRIBUTES/VARIABLE_VALUE": r.standard_normal(i % 7).astype(np.float32)
            for i in range(300)}
        tensors["grid"] = np.arange(48, dtype=np.int64).reshape(6, 8)
        tensors["bf"] = Tensor(np.arange(5, dtype=np.uint16), "bfloat16")
        tensors["s"] = Tensor([b"", b"ab\x00", b"xyz" * 50], "string", [3])
        tensors[b"\xffhigh"] = np.float64(2.5)
        sl = {"grid": [[(0, 3), (0, 4)], [(0, 3), (4, 4)], [(3, 3), None]]}
        for comp in (None, "snappy"):
            for ri in (1, 16):
                for shards in (1, 3):
                    p = os.path.join(d, f"b_{comp}_{ri}_{shards}")
                    b = write_bundle(p, tensors, shards=shards, block_size=300,
                                     restart_interval=ri, compression=comp, slices=sl)
                    try:
                        got, hdr = read_bundle(p)
                    except ValueError as e:
                        fails.append(f"{p}: {e}")
                        continue
                    expect(hdr["num_shards"] == shards, f"{p}: num_shards")
                    expect(len(b.data_blocks()) > 10, f"{p}: {len(b.data_blocks())} data blocks")
                    if comp:
                        expect(any(x.type == TYPE_SNAPPY for x in b.blocks),
                               f"{p}: no Snappy block")
                    for name, v in tensors.items():
                        g = got.get(_b(name))
                        if isinstance(v, Tensor) and v.dtype == "string":
                            ok = isinstance(g, Tensor) and g.value == list(v.value)
                        else:
                            want = np.asarray(v.value if isinstance(v, Tensor) else v)
                            ok = (g is not None and g.shape == want.shape and
                                  g.tobytes() == want.tobytes())
                        if not ok:
                            fails.append(f"{p}: {name!r} read back wrong")
                            break
    finally:
        if own:
            import shutil
            shutil.rmtree(d, ignore_errors=True)
    return fails


# ---- CLI -----------------------------------------------------------------------------------------


def _demo_tensors(n: int, seed: int, sliced: bool) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    r = np.random.default_rng(seed)
    t: Dict[str, Any] = {}
    for i in range(n):
        t[f"model/layer_{i}/kernel/.ATTRIBUTES/VARIABLE_VALUE"] = \
            r.standard_normal((i % 5 + 1, 3)).astype(np.float32)
    t["save_counter/.ATTRIBUTES/VARIABLE_VALUE"] = np.int64(1)
    sl = {}
    if sliced:
        t["model/partitioned/.ATTRIBUTES/VARIABLE_VALUE"] = np.arange(24.0).reshape(4, 6)
        sl["model/partitioned/.ATTRIBUTES/VARIABLE_VALUE"] = [[(0, 2), None], [(2, 2), None]]
    return t, sl


def main(argv: Sequence[str]) -> int:
    import argparse
    import json

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    st = sub.add_parser("selftest", help="known vectors and round trips")
    st.add_argument("--fixtures", metavar="DIR",
                    help="also read every bundle TensorFlow wrote under DIR (*.index) and write "
                         "it again: byte for byte the same")
    w = sub.add_parser("write", help="write a demo bundle")
    w.add_argument("prefix")
    w.add_argument("--tensors", type=int, default=10)
    w.add_argument("--shards", type=int, default=1)
    w.add_argument("--block-size", type=int, default=262144)
    w.add_argument("--restart", type=int, default=16)
    w.add_argument("--snappy", action="store_true")
    w.add_argument("--sliced", action="store_true")
    w.add_argument("--seed", type=int, default=0)
    r = sub.add_parser("read", help="list (or print) a bundle's tensors")
    r.add_argument("prefix")
    r.add_argument("--values", action="store_true")
    bl = sub.add_parser("blocks", help="the index's blocks, footer and header")
    bl.add_argument("prefix")
    a = ap.parse_args(argv)
    if a.cmd == "selftest":
        fails = selftest()
        if a.fixtures:
            import glob
            import tempfile
            found = sorted(glob.glob(os.path.join(a.fixtures, "**", "*.index"), recursive=True))
            if not found:
                fails.append(f"no *.index under {a.fixtures}")
            with tempfile.TemporaryDirectory(prefix="tfbundle-") as tmp:
                for idx in found:
                    more = rewrite_check(idx[:-len(".index")], tmp)
                    print(f"{idx}: {'written again byte for byte' if not more else more}")
                    fails += more
        for f in fails:
            print("FAIL:", f)
        print("selftest:", "ok" if not fails else f"{len(fails)} failures")
        return 1 if fails else 0
    if a.cmd == "write":
        t, sl = _demo_tensors(a.tensors, a.seed, a.sliced)
        b = write_bundle(a.prefix, t, shards=a.shards, block_size=a.block_size,
                         restart_interval=a.restart, compression="snappy" if a.snappy else None,
                         slices=sl)
        print(f"{b.index_path}: {len(b.entries)} entries, {len(b.data_blocks())} data blocks, "
              f"{b.index_size} bytes; {len(b.data_paths)} shards")
        return 0
    try:
        if a.cmd == "blocks":
            header, entries, blocks = read_entries(a.prefix)
            print(json.dumps(header))
            for blk in blocks:
                print(f"{blk.kind:9} offset {blk.offset:8} size {blk.size:7} type {blk.type} "
                      f"entries {blk.entries}")
            return 0
        tensors, header = read_bundle(a.prefix)
    except (FormatError, OSError) as e:
        print(f"tfbundle: {e}", file=sys.stderr)
        return 1
    for k, v in tensors.items():
        dt = DT_NAME.get(header["dtypes"][k], header["dtypes"][k])
        shape = v.shape if not isinstance(v, Tensor) else tuple(v.dims())
        line = f"{k.decode(errors='backslashreplace')}\t{dt}\t{list(shape)}"
        if a.values:
            line += "\t" + (repr(v.value) if isinstance(v, Tensor) else
                            np.array2string(v, threshold=20))
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
