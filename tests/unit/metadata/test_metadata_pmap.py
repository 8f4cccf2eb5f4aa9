"""PMap: behaves like an immutable dict, and new versions share untouched shards."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from kraftpy.metadata.image.pmap import SHARDS, PMap, PVector

ops = st.lists(st.tuples(st.booleans(), st.integers(0, 300), st.integers()), max_size=200)


@given(ops)
def test_matches_a_dict_and_old_versions_never_change(operations) -> None:
    model: dict[int, int] = {}
    current: PMap[int, int] = PMap.EMPTY
    versions = [(current, dict(model))]
    for is_set, key, value in operations:
        if is_set:
            model[key] = value
            current = current.set(key, value)
        else:
            model.pop(key, None)
            current = current.delete(key)
        versions.append((current, dict(model)))
    for version, snapshot in versions:
        assert dict(version.items()) == snapshot
        assert len(version) == len(snapshot)
        assert version == snapshot
        for key in range(0, 300, 7):
            assert (key in version) == (key in snapshot)
            assert version.get(key) == snapshot.get(key)


@given(ops)
def test_builder_applies_many_changes_at_once(operations) -> None:
    base = PMap.from_dict({i: i for i in range(50)})
    model = {i: i for i in range(50)}
    builder = base.builder()
    for is_set, key, value in operations:
        if is_set:
            builder[key] = value
            model[key] = value
        else:
            builder.pop(key)
            model.pop(key, None)
    assert builder.build() == model
    assert base == {i: i for i in range(50)}


def test_one_change_shares_every_other_shard() -> None:
    big = PMap.from_dict({i: str(i) for i in range(20_000)})
    changed = big.set(5, "five")
    shared = sum(a is b for a, b in zip(big._shards, changed._shards, strict=True))
    assert shared == SHARDS - 1
    assert list(changed.changed_keys(big)) == [5]
    assert sorted(big.delete(7).set(20_001, "x").changed_keys(big)) == [7, 20_001]


def test_builder_stays_safe_after_build() -> None:
    builder = PMap.EMPTY.builder()
    builder["a"] = 1
    first = builder.build()
    builder["a"] = 2
    assert first["a"] == 1 and builder.build()["a"] == 2


def test_equality_and_repr() -> None:
    assert PMap.from_dict({"a": 1}) == PMap.from_dict([("a", 1)])
    assert PMap.from_dict({"a": 1}) != PMap.from_dict({"a": 2})
    assert PMap.from_dict({"a": 1}) != PMap.EMPTY
    assert repr(PMap.from_dict({"a": 1})) == "PMap({'a': 1})"


# --- PVector ---------------------------------------------------------------------------------------

vector_ops = st.lists(st.tuples(st.integers(0, 400), st.integers()), max_size=60)


@given(st.integers(0, 300), vector_ops)
def test_pvector_matches_a_list_and_old_versions_never_change(size, edits) -> None:
    model = list(range(size))
    vector = PVector(model)
    versions = [(vector, list(model))]
    for index, value in edits:
        index = min(index, len(model))  # set an existing index or append at the end
        if index == len(model):
            model.append(value)
        else:
            model[index] = value
        vector = vector.evolve({index: value})
        versions.append((vector, list(model)))
    for version, snapshot in versions:
        assert list(version) == snapshot and len(version) == len(snapshot) and version == snapshot
        if snapshot:
            assert version[-1] == snapshot[-1] and version[len(snapshot) // 2] == snapshot[len(snapshot) // 2]
            assert version[1:3] == snapshot[1:3]


def test_pvector_shares_untouched_chunks_and_reports_changed_indices() -> None:
    base = PVector(range(5000))
    changed = base.evolve({70: -1, 5000: 5000, 5001: 5001})
    assert sum(a is b for a, b in zip(base._chunks, changed._chunks, strict=False)) == len(base._chunks) - 2
    assert list(changed.changed_indices(base)) == [70, 5000, 5001]
    assert base.evolve({}) is base


def test_pvector_rejects_gaps_and_bad_indexes() -> None:
    import pytest

    with pytest.raises(IndexError):
        PVector([1, 2]).evolve({3: 0})
    with pytest.raises(IndexError):
        PVector([1, 2])[2]
    assert PVector([1, 2]) == (1, 2) and PVector([1, 2]) != PVector([2, 1]) and repr(PVector([1])) == "PVector([1])"
