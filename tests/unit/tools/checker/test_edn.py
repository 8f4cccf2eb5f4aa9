"""The strict EDN reader: the forms Jepsen writes, and errors that name the line."""

from __future__ import annotations

import pytest

from kraftpy.tools.checker.edn import EdnError, Keyword, Symbol, iter_forms, loads


def test_scalars_and_collections() -> None:
    value = loads('{:a 1, :b [1 -2 "x\\ny"] :c #{:k} :d nil :e -3.5 :f true :g (x y) :h \\a}')
    assert value == {
        Keyword("a"): 1,
        Keyword("b"): (1, -2, "x\ny"),
        Keyword("c"): frozenset({Keyword("k")}),
        Keyword("d"): None,
        Keyword("e"): -3.5,
        Keyword("f"): True,
        Keyword("g"): (Symbol("x"), Symbol("y")),
        Keyword("h"): "a",
    }


def test_keywords_are_not_strings() -> None:
    assert loads(":ok") != "ok"
    assert loads('"ok"') == "ok"


def test_tagged_records_read_as_their_form_and_discard_drops() -> None:
    assert loads("#jepsen.history.Op{:index 0 #_ :dropped :type :ok}") == {
        Keyword("index"): 0,
        Keyword("type"): Keyword("ok"),
    }


def test_iter_forms_one_per_line_and_vector() -> None:
    assert [line for _, line in iter_forms("{:a 1}\n\n{:b 2}\n")] == [1, 3]
    forms = list(iter_forms("[{:a 1}\n {:b 2}\n]"))
    assert forms == [({Keyword("a"): 1}, 1), ({Keyword("b"): 2}, 2)]
    # Knossos's data files: a list of maps, with comments between them
    forms = list(iter_forms("({:a 1}\n ; why\n {:b 2})\n"))
    assert forms == [({Keyword("a"): 1}, 1), ({Keyword("b"): 2}, 3)]


@pytest.mark.parametrize(
    ("text", "line", "fragment"),
    [
        ("{:a 1}\n{:a 2", 2, "never closed"),
        ("{:a 1}\n{:a 1 :b}", 2, "odd number"),
        ('{:a "x}', 1, "unterminated string"),
        ("{:a 1}\n\n[1 2)", 3, "expected ']'"),
        ("{:a @x}", 1, "cannot read"),
        ("{:a 1 :a 2}", 1, "duplicate map key"),
        ("1/3", 1, "cannot read"),
    ],
)
def test_errors_name_the_line(text: str, line: int, fragment: str) -> None:
    with pytest.raises(EdnError) as info:
        list(iter_forms(text))
    assert info.value.line == line
    assert fragment in str(info.value)
