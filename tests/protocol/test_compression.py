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
