"""Compression of a batch's records section, with the framing Kafka's Java client uses.

Design notes: docs/record-batch.md, section "protocol/records/compression.py".
"""

from __future__ import annotations

import enum
import struct
import zlib

import cramjam
import lz4.frame
import zstandard

from kraftpy.protocol.errors import BatchTooLargeError, CorruptRecordError, ErrorCode


class CompressionType(enum.IntEnum):
    """The compression codec of a batch: attributes bits 0-2, Kafka's numbering."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


class DecompressionError(CorruptRecordError):
    """A compressed records section is malformed or truncated."""


class DecompressedTooLargeError(BatchTooLargeError):
    """A records section inflates beyond the allowed maximum."""


class UnsupportedCompressionError(CorruptRecordError):
    """Attributes name a compression codec that does not exist (5-7)."""

    code = ErrorCode.UNSUPPORTED_COMPRESSION_TYPE


XERIAL_MAGIC = b"\x82SNAPPY\x00"
XERIAL_HEADER = struct.Struct(">8sii")
XERIAL_BLOCK_SIZE = 32 * 1024  # snappy-java's default, which Kafka keeps
_INT32 = struct.Struct(">i")

# gzip level 6 is zlib's and GZIPOutputStream's default.
GZIP_LEVEL = 6
ZSTD_LEVEL = 3  # zstd's and Kafka's default
# A zstd block inflates to at most 128 KiB and takes at least 4 bytes, which
# bounds how much one chunk of input can produce (see _zstd_decompress).
_ZSTD_BLOCK_MAX = 128 * 1024
_ZSTD_MIN_BLOCK = 4


def compression_type(value: int) -> CompressionType:
    """The CompressionType for attribute bits 0-2, or UnsupportedCompressionError."""
    try:
        return CompressionType(value)
    except ValueError:
        raise UnsupportedCompressionError(f"unknown compression type {value}") from None


def compress(codec: CompressionType | int, data: bytes | bytearray | memoryview) -> bytes:
    """Compress a records section with `codec`'s Kafka framing."""
    codec = compression_type(codec)
    if codec is CompressionType.NONE:
        return bytes(data)
    if codec is CompressionType.GZIP:
        # mtime=0 keeps the output a pure function of the input.
        obj = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
        return obj.compress(data) + obj.flush()
    if codec is CompressionType.SNAPPY:
        return _xerial_compress(data)
    if codec is CompressionType.LZ4:
        return lz4.frame.compress(
            bytes(data),
            block_size=lz4.frame.BLOCKSIZE_MAX64KB,
            block_linked=False,
            content_checksum=False,
            store_size=False,
        )
    return zstandard.ZstdCompressor(level=ZSTD_LEVEL).compress(bytes(data))


def decompress(codec: CompressionType | int, data: bytes | bytearray | memoryview, max_size: int) -> bytes:
    """Inflate a records section, refusing to produce more than `max_size` bytes."""
    codec = compression_type(codec)
    if codec is CompressionType.NONE:
        if len(data) > max_size:
            raise DecompressedTooLargeError(f"records section of {len(data)} bytes exceeds {max_size}")
        return bytes(data)
    try:
        if codec is CompressionType.GZIP:
            return _gzip_decompress(data, max_size)
        if codec is CompressionType.SNAPPY:
            return _snappy_decompress(bytes(data), max_size)
        if codec is CompressionType.LZ4:
            return _lz4_decompress(data, max_size)
        return _zstd_decompress(data, max_size)
    except CorruptRecordError:
        raise
    except (zlib.error, RuntimeError, zstandard.ZstdError, cramjam.DecompressionError, ValueError) as exc:
        # lz4 raises RuntimeError, cramjam its own error, zstandard ZstdError.
        raise DecompressionError(f"{codec.name} data is malformed: {exc}") from None


def _too_large(codec: str, max_size: int) -> DecompressedTooLargeError:
    return DecompressedTooLargeError(f"{codec} records section inflates beyond the maximum {max_size} bytes")


def _gzip_decompress(data: bytes | bytearray | memoryview, max_size: int) -> bytes:
    out = bytearray()
    rest = bytes(data)
    if not rest:
        raise DecompressionError("GZIP data is empty")
    while rest:
        obj = zlib.decompressobj(16 + zlib.MAX_WBITS)
        chunk = obj.decompress(rest, max_size - len(out) + 1)
        out += chunk
        if len(out) > max_size:
            raise _too_large("GZIP", max_size)
        if not obj.eof:
            if obj.unconsumed_tail:
                raise _too_large("GZIP", max_size)
            raise DecompressionError("GZIP stream is truncated")
        rest = obj.unused_data
    return bytes(out)


def _xerial_compress(data: bytes | bytearray | memoryview) -> bytes:
    view = memoryview(data)
    parts = [XERIAL_HEADER.pack(XERIAL_MAGIC, 1, 1)]
    for start in range(0, len(view), XERIAL_BLOCK_SIZE):
        block = bytes(cramjam.snappy.compress_raw(view[start : start + XERIAL_BLOCK_SIZE]))
        parts.append(_INT32.pack(len(block)))
        parts.append(block)
    return b"".join(parts)


def _raw_snappy_length(block: bytes) -> int:
    # The preamble is an unsigned little-endian varint of at most 5 bytes.
    result = 0
    for i in range(min(5, len(block))):
        byte = block[i]
        result |= (byte & 0x7F) << (7 * i)
        if byte < 0x80:
            return result
    raise DecompressionError("SNAPPY block preamble is truncated or too long")


def _raw_snappy(block: bytes, budget: int, max_size: int) -> bytes:
    if _raw_snappy_length(block) > budget:
        raise _too_large("SNAPPY", max_size)
    return bytes(cramjam.snappy.decompress_raw(block))


def _snappy_decompress(data: bytes, max_size: int) -> bytes:
    if not data.startswith(XERIAL_MAGIC):
        return _raw_snappy(data, max_size, max_size)
    if len(data) < XERIAL_HEADER.size:
        raise DecompressionError(f"SNAPPY xerial header needs {XERIAL_HEADER.size} bytes, {len(data)} given")
    pos = XERIAL_HEADER.size
    out = bytearray()
    while pos < len(data):
        if len(data) - pos < 4:
            raise DecompressionError(f"SNAPPY xerial block length is truncated at byte {pos}")
        (length,) = _INT32.unpack_from(data, pos)
        pos += 4
        if length < 0 or pos + length > len(data):
            raise DecompressionError(f"SNAPPY xerial block length {length} at byte {pos - 4} runs past the end")
        out += _raw_snappy(data[pos : pos + length], max_size - len(out), max_size)
        pos += length
    return bytes(out)


def _lz4_decompress(data: bytes | bytearray | memoryview, max_size: int) -> bytes:
    out = bytearray()
    rest = bytes(data)
    if not rest:
        raise DecompressionError("LZ4 data is empty")
    while rest:
        obj = lz4.frame.LZ4FrameDecompressor()
        out += obj.decompress(rest, max_length=max_size - len(out) + 1)
        if len(out) > max_size:
            raise _too_large("LZ4", max_size)
        if not obj.eof:
            raise DecompressionError("LZ4 frame is truncated")
        rest = obj.unused_data
    return bytes(out)


def _zstd_decompress(data: bytes | bytearray | memoryview, max_size: int) -> bytes:
    # zstandard's decompressobj has no output limit, so feed it input in
    # chunks small enough that one chunk cannot overshoot the remaining budget
    # by more than a few blocks: n input bytes complete at most n/4 blocks.
    view = memoryview(bytes(data))
    if not view:
        raise DecompressionError("ZSTD data is empty")
    dctx = zstandard.ZstdDecompressor()
    out = bytearray()
    pos = 0
    while pos < len(view):  # one frame per pass
        obj = dctx.decompressobj()
        while not obj.eof:
            if pos >= len(view):
                raise DecompressionError("ZSTD frame is truncated")
            budget = max_size - len(out)
            step = max(64, (budget // _ZSTD_BLOCK_MAX) * _ZSTD_MIN_BLOCK)
            chunk = view[pos : pos + step]
            out += obj.decompress(chunk)
            if len(out) > max_size:
                raise _too_large("ZSTD", max_size)
            # At a frame's end the object keeps what it did not use.
            pos += len(chunk) - len(obj.unused_data)
    return bytes(out)
