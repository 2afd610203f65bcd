"""minibroker.protocol.compression: every codec producers use decompresses to the original bytes, bad bytes
raise DecompressionError (never something else), and no output grows past the limit."""

import os

import pytest

from minibroker.protocol.compression import DecompressionError, DecompressionLimitError, decompress
from tests.support.batches import CODECS, compress

DATA = os.urandom(3000) + bytes(20000)  # some incompressible, some very compressible


@pytest.mark.parametrize("name", sorted(CODECS))
def test_round_trip(name):
    codec, packed = compress(name, DATA)
    assert decompress(codec, packed, len(DATA)) == DATA


@pytest.mark.parametrize("name", sorted(CODECS))
def test_output_over_the_limit_is_refused(name):
    codec, packed = compress(name, DATA)
    with pytest.raises(DecompressionLimitError):
        decompress(codec, packed, len(DATA) - 1)


@pytest.mark.parametrize("name", sorted(CODECS))
def test_damaged_or_truncated_input_raises_decompression_error(name):
    codec, packed = compress(name, DATA)
    for bad in (packed[: len(packed) // 2], b"\xff" * 40, b""):
        try:
            out = decompress(codec, bad, len(DATA))
        except DecompressionError:
            continue
        # A codec may accept a cut at a block boundary; what it returns is then a prefix.
        assert DATA.startswith(out), name


def test_unknown_codec():
    with pytest.raises(DecompressionError, match="codec 7"):
        decompress(7, b"", 10)


# lz4's and zstd's output buffer starts at 64 KiB (or 4 times the input) and grows 4 times at a time up
# to the bound, a full buffer meaning there may be more; gzip stops at the bound, snappy reads the
# sizes its blocks state. Outputs on both sides of each step and of the bound, from input in any
# buffer type (a batch in a frame received in place is a view of a bytearray).
GROWTH_SIZES = [65535, 65536, 65537, 4 * 65536 - 1, 4 * 65536, 4 * 65536 + 1, 16 * 65536 + 1]


@pytest.mark.parametrize("name", sorted(CODECS))
def test_outputs_around_each_step_of_the_output_buffer_and_the_bound(name):
    for size in GROWTH_SIZES:
        data = (bytes(range(256)) * (size // 256 + 1))[:size]  # compresses far below a quarter
        codec, packed = compress(name, data)
        if name in ("lz4", "zstd"):
            assert 4 * len(packed) < size, "the buffer would start large enough: no step crossed"
        for kind in (bytes, lambda b: memoryview(bytearray(b"?" + b + b"?"))[1:-1]):
            assert decompress(codec, kind(packed), size) == data, (name, size)
            assert decompress(codec, kind(packed), 1 << 26) == data, (name, size)
            with pytest.raises(DecompressionLimitError):
                decompress(codec, kind(packed), size - 1)
