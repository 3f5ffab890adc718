"""A compressed record unpacked with a cap: no file may make a reader hold more than a real
record could ever be."""

from __future__ import annotations

import zlib

MAX_UNPACKED = 512 * 2**20
"""The most a compressed record may unpack to. A record keeps a few KB a result (a suite of
10,000 results is tens of MB); a file that unpacks past this is not one (a 3 MB file that
unpacks to 3 GiB once took `baselines list` to 6.3 GB of memory and down)."""


def gunzip(content: bytes, where: str, error: type[Exception]) -> bytes:
    """The unpacked bytes, read in pieces and refused (`error`, naming `where`) past
    `MAX_UNPACKED`."""
    unpack = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    out = bytearray()
    rest = content
    while rest:
        out += unpack.decompress(rest, MAX_UNPACKED + 1 - len(out))
        if len(out) > MAX_UNPACKED:
            raise error(
                f"{where}: unpacks to more than {MAX_UNPACKED // 2**20} MiB, which no perfguard "
                "record does: move it aside or delete it"
            )
        rest = unpack.unconsumed_tail
        if unpack.eof:
            rest = unpack.unused_data  # a second gzip member follows, as gzip allows
            if rest:
                unpack = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    if not unpack.eof:
        raise EOFError("compressed file ended before the end-of-stream marker was reached")
    return bytes(out)
