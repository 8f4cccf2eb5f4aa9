"""A persistent (immutable, structurally shared) hash map for the metadata image.

Design notes: docs/metadata.md, section "metadata/image/pmap.py".
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")

_SHARD_BITS = 7
SHARDS = 1 << _SHARD_BITS
_MASK = SHARDS - 1
_EMPTY_SHARD: dict[Any, Any] = {}


class _ShardedReads(Generic[K, V]):
    """Key lookups over `_shards`, the same for a map and for its builder."""

    __slots__ = ()
    _shards: Sequence[dict[K, V]]

    def __getitem__(self, key: K) -> V:
        return self._shards[hash(key) & _MASK][key]

    def get(self, key: K, default: Any = None) -> Any:
        return self._shards[hash(key) & _MASK].get(key, default)

    def __contains__(self, key: object) -> bool:
        return key in self._shards[hash(key) & _MASK]


class PMap(_ShardedReads[K, V], Mapping[K, V]):
    """An immutable mapping; `set`, `delete` and `builder` return new versions."""

    __slots__ = ("_len", "_shards")

    EMPTY: PMap[Any, Any]

    def __init__(self, shards: tuple[dict[K, V], ...], length: int) -> None:
        self._shards = shards
        self._len = length

    @classmethod
    def from_dict(cls, items: Mapping[K, V] | Iterable[tuple[K, V]]) -> PMap[K, V]:
        builder: PMapBuilder[K, V] = PMapBuilder(PMap.EMPTY)
        pairs = items.items() if isinstance(items, Mapping) else items
        for key, value in pairs:
            builder[key] = value
        return builder.build()

    def __len__(self) -> int:
        return self._len

    def __iter__(self) -> Iterator[K]:
        for shard in self._shards:
            yield from shard

    def items(self) -> Iterator[tuple[K, V]]:  # type: ignore[override]
        for shard in self._shards:
            yield from shard.items()

    def values(self) -> Iterator[V]:  # type: ignore[override]
        for shard in self._shards:
            yield from shard.values()

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if isinstance(other, PMap):
            if self._len != other._len:
                return False
            return all(a is b or a == b for a, b in zip(self._shards, other._shards, strict=True))
        if isinstance(other, Mapping):
            return dict(self.items()) == dict(other.items())
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"PMap({dict(self.items())!r})"

    def set(self, key: K, value: V) -> PMap[K, V]:
        builder = PMapBuilder(self)
        builder[key] = value
        return builder.build()

    def delete(self, key: K) -> PMap[K, V]:
        builder = PMapBuilder(self)
        builder.pop(key, None)
        return builder.build()

    def builder(self) -> PMapBuilder[K, V]:
        return PMapBuilder(self)

    def changed_keys(self, older: PMap[K, V]) -> Iterator[K]:
        """Keys added, removed or rebound since `older`, found by comparing shards by identity.

        Cheap when both versions share most shards (one is derived from the other).
        """
        for new_shard, old_shard in zip(self._shards, older._shards, strict=True):
            if new_shard is old_shard:
                continue
            for key, value in new_shard.items():
                if old_shard.get(key, _MISSING) is not value:
                    yield key
            for key in old_shard:
                if key not in new_shard:
                    yield key


_MISSING = object()


class PMapBuilder(_ShardedReads[K, V]):
    """A mutable draft of a PMap; `build()` freezes it. Copies each touched shard once."""

    __slots__ = ("_base", "_dirty", "_len", "_owned", "_shards")

    def __init__(self, base: PMap[K, V]) -> None:
        self._base = base
        self._dirty = False
        self._shards: list[dict[K, V]] = list(base._shards)
        self._owned = [False] * SHARDS
        self._len = base._len

    def _own(self, index: int) -> dict[K, V]:
        self._dirty = True
        if not self._owned[index]:
            self._shards[index] = dict(self._shards[index])
            self._owned[index] = True
        return self._shards[index]

    def __setitem__(self, key: K, value: V) -> None:
        shard = self._own(hash(key) & _MASK)
        if key not in shard:
            self._len += 1
        shard[key] = value

    def pop(self, key: K, default: Any = None) -> Any:
        index = hash(key) & _MASK
        if key not in self._shards[index]:
            return default
        self._len -= 1
        return self._own(index).pop(key)

    def __len__(self) -> int:
        return self._len

    def build(self) -> PMap[K, V]:
        """The frozen map (the base itself when nothing changed); the builder stays usable."""
        if not self._dirty:
            return self._base
        shards = tuple(shard if shard else _EMPTY_SHARD for shard in self._shards)
        self._owned = [False] * SHARDS
        self._dirty = False
        self._base = PMap(shards, self._len)
        return self._base


PMap.EMPTY = PMap(tuple(_EMPTY_SHARD for _ in range(SHARDS)), 0)


T = TypeVar("T")
_CHUNK_BITS = 6
CHUNK = 1 << _CHUNK_BITS
_CHUNK_MASK = CHUNK - 1


class PVector(Sequence[T], Generic[T]):
    """An immutable sequence in chunks of 64; `evolve` copies only the chunks it touches.

    Partitions of a topic live in one: changing one partition of a 100,000-partition
    topic copies one chunk and the chunk index, not 100,000 references.
    """

    __slots__ = ("_chunks", "_len")

    EMPTY: PVector[Any]

    def __init__(self, items: Iterable[T] = ()) -> None:
        flat = list(items)
        self._chunks: tuple[tuple[T, ...], ...] = tuple(tuple(flat[i : i + CHUNK]) for i in range(0, len(flat), CHUNK))
        self._len = len(flat)

    @classmethod
    def _of(cls, chunks: tuple[tuple[T, ...], ...], length: int) -> PVector[T]:
        out = cls.__new__(cls)
        out._chunks = chunks
        out._len = length
        return out

    def __len__(self) -> int:
        return self._len

    def __getitem__(self, index):  # type: ignore[no-untyped-def,override]
        if isinstance(index, slice):
            return list(self)[index]
        if index < 0:
            index += self._len
        if not 0 <= index < self._len:
            raise IndexError(f"index {index} out of range for {self._len} items")
        return self._chunks[index >> _CHUNK_BITS][index & _CHUNK_MASK]

    def __iter__(self) -> Iterator[T]:
        for chunk in self._chunks:
            yield from chunk

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if isinstance(other, PVector):
            return self._len == other._len and all(
                a is b or a == b for a, b in zip(self._chunks, other._chunks, strict=True)
            )
        if isinstance(other, list | tuple):
            return self._len == len(other) and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"PVector({list(self)!r})"

    def evolve(self, changes: Mapping[int, T]) -> PVector[T]:
        """A new version with `changes` (index -> item); indices from len(self) on append, without gaps."""
        if not changes:
            return self
        length = max(self._len, max(changes) + 1)
        if length - self._len > sum(1 for i in changes if i >= self._len):
            raise IndexError("appending would leave a gap")
        chunks = list(self._chunks)
        by_chunk: dict[int, list[tuple[int, T]]] = {}
        for index, item in changes.items():
            if index < 0:
                raise IndexError(f"negative index {index}")
            by_chunk.setdefault(index >> _CHUNK_BITS, []).append((index & _CHUNK_MASK, item))
        for c, items in by_chunk.items():
            chunk = list(chunks[c]) if c < len(chunks) else []
            for offset, item in sorted(items, key=lambda x: x[0]):
                if offset < len(chunk):
                    chunk[offset] = item
                else:
                    chunk.append(item)
            if c < len(chunks):
                chunks[c] = tuple(chunk)
            else:
                chunks.append(tuple(chunk))
        return PVector._of(tuple(chunks), length)

    def changed_indices(self, older: PVector[T]) -> Iterator[int]:
        """Indices whose item differs by identity from `older` (or is new), skipping shared chunks."""
        for c, chunk in enumerate(self._chunks):
            old = older._chunks[c] if c < len(older._chunks) else ()
            if chunk is old:
                continue
            base = c << _CHUNK_BITS
            for i, item in enumerate(chunk):
                if i >= len(old) or old[i] is not item:
                    yield base + i


PVector.EMPTY = PVector()
