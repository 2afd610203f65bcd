"""Decompressing the records section of a v2 batch, with a bound on the output.

Kafka's codecs (attribute bits 0-2): 1 gzip, 2 snappy, 3 lz4, 4 zstd; 5-7 are not codecs. The broker
stores batches compressed, as produced; it decompresses once, only to check the records inside
(minibroker.protocol.records.check_records), and throws the result away; and ListOffsets by timestamp reads the
records of the one batch that straddles its target (minibroker.storage.segment), as Kafka answers the exact record.

* gzip: RFC 1952 members (Java's GZIPOutputStream, librdkafka), through the standard library's zlib
  with `max_length`, so a bomb stops at the bound.
* snappy: either xerial's framing (Java's SnappyOutputStream: the 8-byte magic "\\x82SNAPPY\\0", two
  int32 versions, then blocks of int32 length + raw snappy) or one raw snappy block (librdkafka); a
  raw block states its decompressed length up front, so the bound is checked before anything is
  allocated.
* lz4: the LZ4 frame format (Kafka's KafkaLZ4BlockOutputStream, magic v1+).
* zstd: zstd frames.
snappy, lz4 and zstd go through cramjam's `decompress_into`, which writes into a buffer it is given
and fails rather than grow it: the output buffer starts small and grows by 4x up to the bound, so a
batch that really holds little costs little memory, and a bomb costs at most the bound.

A bound that is exceeded raises `DecompressionLimitError`, a kind of `DecompressionError`, which is
what data the codec cannot decode raises (catch the limit first where the two are answered apart);
minibroker.protocol.records turns them into Kafka's error codes.
"""

from __future__ import annotations

import struct
import zlib

import cramjam

GZIP, SNAPPY, LZ4, ZSTD = 1, 2, 3, 4
CODEC_NAMES = {0: "none", GZIP: "gzip", SNAPPY: "snappy", LZ4: "lz4", ZSTD: "zstd"}

_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = 16  # magic, version i32, compatible version i32
_INT32 = struct.Struct(">i")
_FIRST_GUESS = 64 * 1024
_GROWTH = 4


class DecompressionError(ValueError):
    """The data is not valid for its codec."""


class DecompressionLimitError(DecompressionError):
    """The data decompresses to more than the bound allowed (a bomb, or simply too large)."""


def decompress(codec: int, data: bytes | bytearray | memoryview, limit: int) -> bytes:
    """The decompressed bytes of `data` (at most `limit` of them)."""
    name = CODEC_NAMES.get(codec, str(codec))
    try:
        if codec == GZIP:
            return _gunzip(data, limit)
        if codec == SNAPPY:
            return _unsnappy(data, limit)
        if codec == LZ4:
            return _grow_into(cramjam.lz4.decompress_into, data, limit, name)
        if codec == ZSTD:
            return _grow_into(cramjam.zstd.decompress_into, data, limit, name)
    except (zlib.error, cramjam.DecompressionError, struct.error) as exc:
        raise DecompressionError(f"{name} data cannot be decompressed: {exc}") from None
    raise DecompressionError(f"codec {codec} has no decompressor")


def _too_large(name: str, limit: int) -> DecompressionLimitError:
    return DecompressionLimitError(f"{name} records decompress to more than {limit} bytes")


def _gunzip(data, limit: int) -> bytes:
    out = []
    size = 0
    rest = data
    while True:
        member = zlib.decompressobj(wbits=31)
        chunk = member.decompress(rest, limit - size + 1)
        size += len(chunk)
        if size > limit:
            raise _too_large("gzip", limit)
        if not member.eof:
            if member.unconsumed_tail:  # stopped at the bound with input left
                raise _too_large("gzip", limit)
            raise DecompressionError("gzip data cannot be decompressed: truncated stream")
        out.append(chunk)
        rest = member.unused_data
        if not rest:  # Java's GZIPInputStream reads concatenated members too
            return out[0] if len(out) == 1 else b"".join(out)


def _unsnappy(data, limit: int) -> bytes:
    view = memoryview(data)
    if bytes(view[:8]) != _XERIAL_MAGIC:
        if cramjam.snappy.decompress_raw_len(view) > limit:
            raise _too_large("snappy", limit)
        return bytes(cramjam.snappy.decompress_raw(view))
    blocks = []
    total = 0
    position = _XERIAL_HEADER
    if len(view) < position:
        raise DecompressionError("snappy data cannot be decompressed: truncated xerial header")
    while position < len(view):
        (length,) = _INT32.unpack_from(view, position)
        position += 4
        if length < 0 or position + length > len(view):
            raise DecompressionError(f"snappy data cannot be decompressed: xerial block of {length} bytes "
                                     f"runs past the {len(view)} given")
        block = view[position : position + length]
        total += cramjam.snappy.decompress_raw_len(block)
        if total > limit:
            raise _too_large("snappy", limit)
        blocks.append(block)
        position += length
    out = bytearray(total)
    written = 0
    for block in blocks:
        written += cramjam.snappy.decompress_raw_into(block, memoryview(out)[written:])
    return bytes(out)


def _grow_into(decompress_into, data, limit: int, name: str) -> bytes:
    size = min(limit, max(_FIRST_GUESS, _GROWTH * len(data)))
    while True:
        out = bytearray(size + 1)  # one spare byte: a full buffer means there may be more
        try:
            written = decompress_into(data, out)
        except cramjam.DecompressionError as exc:
            if "failed to write whole buffer" not in str(exc):
                raise
            written = size + 1
        if written <= size:
            del out[written:]
            return bytes(out)
        if size >= limit:
            raise _too_large(name, limit)
        del out  # before the next, larger one: peak memory stays near the bound
        size = min(limit, size * _GROWTH)


# -- compressing: the log cleaner rewrites a batch with the codec it was written with ---------------

_XERIAL_BLOCK = 32 * 1024  # Java's SnappyOutputStream default block size
_LZ4_BLOCK = 64 * 1024  # KafkaLZ4BlockOutputStream's default (BD = 64 KB)
_LZ4_MAGIC = b"\x04\x22\x4d\x18"
_LZ4_FLG = 0x60  # version 01, independent blocks, no checksums, no content size (Kafka's frames)
_LZ4_BD = 0x40  # 64 KB maximum block size


def compress(codec: int, data: bytes | bytearray | memoryview) -> bytes:
    """`data` compressed with `codec` in the framing Kafka's own broker writes when it recompresses:
    a gzip member, xerial-framed snappy (Java's SnappyOutputStream), an LZ4 frame of independent
    64 KB blocks (KafkaLZ4BlockOutputStream), a zstd frame. Every client reads these."""
    view = memoryview(data)
    if codec == GZIP:
        compressor = zlib.compressobj(wbits=31)
        return compressor.compress(view) + compressor.flush()
    if codec == SNAPPY:
        out = bytearray(_XERIAL_MAGIC + _INT32.pack(1) + _INT32.pack(1))
        for start in range(0, len(view), _XERIAL_BLOCK):
            block = bytes(cramjam.snappy.compress_raw(view[start : start + _XERIAL_BLOCK]))
            out += _INT32.pack(len(block)) + block
        return bytes(out)
    if codec == LZ4:
        descriptor = bytes((_LZ4_FLG, _LZ4_BD))
        out = bytearray(_LZ4_MAGIC + descriptor + bytes(((_xxh32(descriptor) >> 8) & 0xFF,)))
        for start in range(0, len(view), _LZ4_BLOCK):
            chunk = view[start : start + _LZ4_BLOCK]
            block = bytes(cramjam.lz4.compress_block(chunk, store_size=False))
            if len(block) >= len(chunk):  # incompressible: stored as is, high bit set
                out += struct.pack("<I", len(chunk) | 0x80000000) + chunk
            else:
                out += struct.pack("<I", len(block)) + block
        return bytes(out + b"\0\0\0\0")
    if codec == ZSTD:
        return bytes(cramjam.zstd.compress(view))
    raise ValueError(f"codec {codec} has no compressor")


_P1, _P2, _P3, _P4, _P5 = 2654435761, 2246822519, 3266489917, 668265263, 374761393


def _xxh32(data: bytes, seed: int = 0) -> int:
    """XXH32 of a short input (< 16 bytes: the LZ4 frame descriptor's header checksum)."""
    assert len(data) < 16
    mask = 0xFFFFFFFF
    h = (seed + _P5 + len(data)) & mask
    i = 0
    while i + 4 <= len(data):
        (word,) = struct.unpack_from("<I", data, i)
        h = (h + word * _P3) & mask
        h = (((h << 17) | (h >> 15)) & mask) * _P4 & mask
        i += 4
    for byte in data[i:]:
        h = (h + byte * _P5) & mask
        h = (((h << 11) | (h >> 21)) & mask) * _P1 & mask
    h ^= h >> 15
    h = (h * _P2) & mask
    h ^= h >> 13
    h = (h * _P3) & mask
    h ^= h >> 16
    return h
