"""Decompressing the records of one stored batch, with a bound on the output.

The broker never decompresses on the produce or fetch path: batches are stored and served as the
producer compressed them. Only a look at single records needs this (ListOffsets by timestamp and
MAX_TIMESTAMP answer the exact record, as Kafka does), one batch at a time.

Codecs are attribute bits 0-2 of a v2 batch (Kafka's CompressionType): 1 gzip (a gzip stream),
2 snappy (Java and kafka-python write xerial's framing, a 16-byte header then length-prefixed raw
blocks; librdkafka writes one raw block; Kafka's reader accepts both, and so does this), 3 lz4 (the
LZ4 frame format, KIP-57), 4 zstd (a zstd frame). The output is bounded by `limit`: a batch that
would decompress to more raises DecompressionLimitError before that much is allocated, so a
small, highly compressible batch cannot make the broker allocate without bound.
"""

from __future__ import annotations

import struct
import zlib

import cramjam

GZIP, SNAPPY, LZ4, ZSTD = 1, 2, 3, 4
CODEC_NAMES = {0: "none", GZIP: "gzip", SNAPPY: "snappy", LZ4: "lz4", ZSTD: "zstd"}

XERIAL_MAGIC = b"\x82SNAPPY\x00"
XERIAL_HEADER_SIZE = 16  # magic, i32 version, i32 compatible version
_BLOCK_LENGTH = struct.Struct(">i")
FIRST_GUESS = 64 * 1024  # first output buffer for codecs that do not declare their size


class DecompressionError(ValueError):
    """The bytes are not a valid stream of the codec."""


class DecompressionLimitError(DecompressionError):
    """The stream decompresses to more than the limit."""


def decompress(codec: int, data: bytes | memoryview, limit: int) -> bytes:
    """The decompressed bytes of `data` under `codec` (1-4), at most `limit` bytes."""
    data = bytes(data)
    if codec == GZIP:
        return _gunzip(data, limit)
    if codec == SNAPPY:
        return _snappy(data, limit)
    if codec in (LZ4, ZSTD):
        return _into_growing_buffer(cramjam.lz4 if codec == LZ4 else cramjam.zstd, data, limit)
    raise DecompressionError(f"unknown compression codec {codec}")


def _gunzip(data: bytes, limit: int) -> bytes:
    inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    try:
        out = inflater.decompress(data, limit + 1)
    except zlib.error as exc:
        raise DecompressionError(f"gzip: {exc}") from None
    if len(out) > limit:
        raise DecompressionLimitError(f"gzip stream decompresses to more than {limit} bytes")
    if not inflater.eof:
        raise DecompressionError("gzip stream is truncated")
    return out


def _snappy(data: bytes, limit: int) -> bytes:
    if not data.startswith(XERIAL_MAGIC):
        return _snappy_raw(data, limit)
    blocks = []
    total = 0
    position = XERIAL_HEADER_SIZE
    while position < len(data):
        if position + 4 > len(data):
            raise DecompressionError("snappy: truncated xerial block length")
        (length,) = _BLOCK_LENGTH.unpack_from(data, position)
        position += 4
        if length < 0 or position + length > len(data):
            raise DecompressionError(f"snappy: xerial block of {length} bytes runs past the data")
        block = _snappy_raw(data[position : position + length], limit - total)
        total += len(block)
        blocks.append(block)
        position += length
    return b"".join(blocks)


def _snappy_raw(data: bytes, limit: int) -> bytes:
    try:
        size = cramjam.snappy.decompress_raw_len(data)  # the block's own header: no allocation
    except cramjam.DecompressionError as exc:
        raise DecompressionError(f"snappy: {exc}") from None
    if size > limit:
        raise DecompressionLimitError(f"snappy block decompresses to {size} bytes, over {limit}")
    try:
        return bytes(cramjam.snappy.decompress_raw(data))
    except cramjam.DecompressionError as exc:
        raise DecompressionError(f"snappy: {exc}") from None


def _into_growing_buffer(module, data: bytes, limit: int) -> bytes:
    """lz4 and zstd frames need not declare their size: decompress into a buffer that doubles
    until the output fits (cramjam stops writing at the buffer's end), up to `limit`."""
    size = min(limit, max(FIRST_GUESS, 4 * len(data)))
    while True:
        buffer = bytearray(size)
        try:
            written = module.decompress_into(data, buffer)
        except cramjam.DecompressionError as exc:
            if "whole buffer" not in str(exc):
                raise DecompressionError(f"{module.__name__.rpartition('.')[2]}: {exc}") from None
            if size >= limit:
                raise DecompressionLimitError(f"stream decompresses to more than {limit} bytes") from None
            size = min(limit, size * 2)
            continue
        return bytes(memoryview(buffer)[:written])
