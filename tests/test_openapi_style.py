"""Parameter serialisation by style/explode, against the "Style Examples" table of OpenAPI 3.0.4 / 3.1.1."""

from __future__ import annotations

import pytest

from chatgpt_tool_hub.errors import ToolInputError
from chatgpt_tool_hub.tools.plugins.openapi._style import cookie_pairs, header_value, path_value, query_pairs

STRING, ARRAY, OBJECT = "blue", ["blue", "black", "brown"], {"R": 100, "G": 200, "B": 150}

# (style, explode, string, array, object) -- the spec's rows; None where the spec says n/a
PATH_TABLE = [
    ("matrix", False, ";color=blue", ";color=blue,black,brown", ";color=R,100,G,200,B,150"),
    ("matrix", True, ";color=blue", ";color=blue;color=black;color=brown", ";R=100;G=200;B=150"),
    ("label", False, ".blue", ".blue,black,brown", ".R,100,G,200,B,150"),
    ("label", True, ".blue", ".blue.black.brown", ".R=100.G=200.B=150"),
    ("simple", False, "blue", "blue,black,brown", "R,100,G,200,B,150"),
    ("simple", True, "blue", "blue,black,brown", "R=100,G=200,B=150"),
]
QUERY_TABLE = [  # the spec shows each as "?<this>"
    ("form", False, "color=blue", "color=blue,black,brown", "color=R,100,G,200,B,150"),
    ("form", True, "color=blue", "color=blue&color=black&color=brown", "R=100&G=200&B=150"),
    ("spaceDelimited", False, None, "color=blue%20black%20brown", "color=R%20100%20G%20200%20B%20150"),
    ("pipeDelimited", False, None, "color=blue%7Cblack%7Cbrown", "color=R%7C100%7CG%7C200%7CB%7C150"),
    ("deepObject", True, None, None, "color%5BR%5D=100&color%5BG%5D=200&color%5BB%5D=150"),
]


def _cases(table):
    for style, explode, *expected in table:
        for value, want in zip((STRING, ARRAY, OBJECT), expected, strict=False):
            if want is not None:
                yield pytest.param(style, explode, value, want, id=f"{style}-{explode}-{type(value).__name__}")


@pytest.mark.parametrize("style, explode, value, expected", list(_cases(PATH_TABLE)))
def test_path_styles_follow_the_spec_table(style, explode, value, expected):
    assert path_value("color", value, style, explode) == expected


@pytest.mark.parametrize("style, explode, value, expected", list(_cases(QUERY_TABLE)))
def test_query_styles_follow_the_spec_table(style, explode, value, expected):
    assert "&".join(query_pairs("color", value, style, explode)) == expected


def test_undefined_and_empty_values():
    assert path_value("color", [], "matrix", False) == ";color"           # the table's "undefined" column
    assert path_value("color", [], "label", False) == "."
    assert path_value("color", "", "matrix", False) == ";color"
    assert query_pairs("color", "", "form", True) == ["color="]
    assert query_pairs("color", [], "form", True) == []
    assert query_pairs("color", {"R": None, "G": 1}, "form", True) == ["G=1"]  # null members are left out


def test_values_are_encoded_and_cannot_leave_their_place():
    assert path_value("id", "../admin?x=1#y", "simple", False) == "..%2Fadmin%3Fx%3D1%23y"
    assert path_value("id", ["a/b", "c,d"], "simple", False) == "a%2Fb,c%2Cd"  # a comma inside a value is data
    assert query_pairs("q", "a&b=c d+e", "form", True) == ["q=a%26b%3Dc%20d%2Be"]
    assert query_pairs("q&x", "1", "form", True) == ["q%26x=1"]
    assert query_pairs("f", {"a]": "x"}, "deepObject", True) == ["f%5Ba%5D%5D=x"]


def test_allow_reserved_keeps_reserved_characters_but_not_the_query_delimiters():
    assert query_pairs("next", "/a/b:c,d?e", "form", True, allow_reserved=True) == ["next=/a/b:c,d?e"]
    assert query_pairs("next", "a&b=c#d", "form", True, allow_reserved=True) == ["next=a%26b%3Dc%23d"]
    assert query_pairs("next", "/a", "form", True) == ["next=%2Fa"]


def test_scalars_and_nested_values():
    assert query_pairs("on", True, "form", True) == ["on=true"]
    assert query_pairs("n", 1.5, "form", True) == ["n=1.5"]
    assert query_pairs("m", [{"a": 1}], "form", True) == ["m=%7B%22a%22%3A1%7D"]   # a nested object: JSON text
    assert query_pairs("f", {"a": {"b": 1}, "c": [1, 2]}, "deepObject", True) == [
        "f%5Ba%5D%5Bb%5D=1", "f%5Bc%5D=1", "f%5Bc%5D=2"]
    assert query_pairs("t", ["a", "b"], "tabDelimited", False) == ["t=a%09b"]      # Swagger 2.0 tsv


def test_headers_use_the_simple_style_and_refuse_line_breaks():
    assert header_value("X-Color", ARRAY) == "blue,black,brown"
    assert header_value("X-Color", OBJECT, explode=False) == "R,100,G,200,B,150"
    assert header_value("X-Color", OBJECT, explode=True) == "R=100,G=200,B=150"
    with pytest.raises(ToolInputError, match="X-Color"):
        header_value("X-Color", "blue\r\nSet-Cookie: x=1")


def test_cookies_use_the_form_style():
    assert cookie_pairs("color", STRING) == ["color=blue"]
    assert cookie_pairs("color", ARRAY, explode=False) == ["color=blue,black,brown"]
    assert cookie_pairs("color", ARRAY, explode=True) == ["color=blue", "color=black", "color=brown"]
    assert cookie_pairs("color", OBJECT, explode=True) == ["R=100", "G=200", "B=150"]
    assert cookie_pairs("c", "a;b c") == ["c=a%3Bb%20c"]  # ';' and ' ' cannot end the cookie
