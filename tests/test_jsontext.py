"""The JSON-in-text reader the parser and the planner share: comments, trailing commas, Python literals."""

from __future__ import annotations

import pytest

from chatgpt_tool_hub.jsontext import FAILED, loads_lenient, skip_comments, strip_comments


@pytest.mark.parametrize("text, value", [
    ('{"url": "http://x.test/a//b", // the page\n "n": 1}', {"url": "http://x.test/a//b", "n": 1}),
    ("{'a': 1, /* it's \"quoted\" */ 'b': 2,}", {"a": 1, "b": 2}),  # quotes inside a comment open nothing
    ('[ // first\n {"task": "a"}, // it\'s the second\n {"task": "b"}\n]', [{"task": "a"}, {"task": "b"}]),
    ('{"s": "/* not a comment */", "t": true}', {"s": "/* not a comment */", "t": True}),
    ("{'don't': 'it's'}", FAILED),  # an apostrophe between letters opens no string, and this is no literal
])
def test_comments_outside_strings_are_dropped_and_strings_kept(text, value):
    assert loads_lenient(text) == value


def test_strip_comments_leaves_text_without_comments_as_it_is():
    plain = '{"a": "b/c"}'
    assert strip_comments(plain) is plain
    assert strip_comments('{"a": 1} /* never closed') == '{"a": 1} '


def test_skip_comments_finds_the_next_real_character():
    text = "[ // a note\n  /* another */ {"
    assert text[skip_comments(text, 1)] == "{"
    assert skip_comments("  // only a comment", 0) == len("  // only a comment")
