"""A small, lenient shell lexer for the terminal's nsfc filter.

:func:`split_commands` turns a command line into its simple commands the way
``bash`` would split them: words with quotes and backslashes removed
(``'r''m'`` is ``rm``, ``$'\\x72m'`` is ``rm``), one level of brace expansion
(``{rm,-rf,/}``), redirections apart from the words (``>|``, ``&>``,
``2>``), here-documents and here-strings attached to their command, and the
command lines nested in a word (``$(...)``, backticks, ``<(...)``,
``>(...)``, also inside double quotes and ``${...}``) listed so they can be
checked too. Nothing is expanded or run: variables, globs and the output of
substitutions stay unknown. Malformed input never raises; an unclosed quote
or substitution runs to the end of the line. Time is linear in the input (the
nested lines are scanned iteratively, never by recursion).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

__all__ = ["Word", "Command", "split_commands", "SEPARATORS"]

# longest first: the lexer takes the longest operator that matches
_OPERATORS = ("<<<", "<<-", ";;&", "&>>", "&&", "||", "|&", ";;", ";&", ">>", ">|", "<>", "<<", "&>", ">&", "<&",
              ";", "&", "|", "(", ")", "<", ">", "\n")
REDIRECTIONS = {"<", ">", ">>", ">|", "<>", "<<", "<<-", "<<<", "&>", "&>>", ">&", "<&"}
SEPARATORS = {";", "&", "&&", "||", ";;", ";&", ";;&", "\n"}  # end a pipeline (``|``, ``|&`` continue it)
_OPERATOR_CHARS = set(";&|()<>\n")
_BRACES = re.compile(r"\{([^{}\s]*,[^{}\s]*)\}")
_ANSI_C = re.compile(r"\\(x[0-9a-fA-F]{1,2}|u[0-9a-fA-F]{1,4}|U[0-9a-fA-F]{1,8}|[0-7]{1,3}|c.|.)", re.S)
_ANSI_SIMPLE = {"a": "\a", "b": "\b", "e": "\x1b", "E": "\x1b", "f": "\f", "n": "\n", "r": "\r", "t": "\t",
                "v": "\v"}
MAX_BRACE_WORDS = 64


@dataclass
class Word:
    """One shell word: ``text`` without quotes (substitutions kept as written), the command lines
    nested in it, whether any part was quoted, whether it is a process substitution ``<(...)``."""

    text: str = ""
    subs: list[str] = field(default_factory=list)
    quoted: bool = False
    procsub: bool = False
    heredoc: str | None = None  # the body, when this word is the delimiter of a here-document


@dataclass
class Command:
    """A simple command: its words (assignments and wrappers included), its redirections, and
    whether its stdin comes from a pipe (``|`` or ``|&`` before it, groups in between)."""

    words: list[Word] = field(default_factory=list)
    redirs: list[tuple[str, Word]] = field(default_factory=list)
    after_pipe: bool = False


def _scan(s: str, i: int, kind: str) -> int:
    """The index of the character that closes the construct opened just before ``i``
    (``paren``: ``$(``/``(``; ``dq``: ``"``; ``bt``: a backtick; ``brace``: ``${``), or ``len(s)``."""
    stack = [kind]
    n = len(s)
    while i < n:
        c, top = s[i], stack[-1]
        if c == "\\":
            i += 2
            continue
        if top == "bt":
            if c == "`":
                stack.pop()
        elif top == "dq":
            if c == '"':
                stack.pop()
            elif c == "`":
                stack.append("bt")
            elif c == "$" and s.startswith(("$(", "${"), i):
                stack.append("paren" if s[i + 1] == "(" else "brace")
                i += 1
        else:  # paren or brace
            if c == "'":
                end = s.find("'", i + 1)
                i = n if end < 0 else end
            elif c == '"':
                stack.append("dq")
            elif c == "`":
                stack.append("bt")
            elif c == "$" and s.startswith(("$(", "${"), i):
                stack.append("paren" if s[i + 1] == "(" else "brace")
                i += 1
            elif c == "(" and top == "paren":
                stack.append("paren")
            elif (c == ")" and top == "paren") or (c == "}" and top == "brace"):
                stack.pop()
        if not stack:
            return i
        i += 1
    return n


def _ansi_c(body: str) -> str:
    """The text of a ``$'...'`` string (``\\x72`` is ``r``)."""
    def one(m: re.Match) -> str:
        esc = m.group(1)
        if esc[0] in "xuU" and len(esc) > 1:
            return chr(min(int(esc[1:], 16), 0x10FFFF))
        if esc[0] in "01234567":
            return chr(int(esc, 8))
        if esc[0] == "c" and len(esc) > 1:
            return chr(ord(esc[1]) & 0x1F)
        return _ANSI_SIMPLE.get(esc, esc)

    return _ANSI_C.sub(one, body)


def _expand_braces(text: str) -> list[str]:
    """One level of brace expansion (``{rm,-rf,/}`` -> ``rm -rf /``), at most 64 words."""
    words: list[str] = []
    pending = [text]
    while pending:
        word = pending.pop(0)
        match = _BRACES.search(word)
        if not match or len(words) + len(pending) >= MAX_BRACE_WORDS:
            words.append(word)
            continue
        head, tail = word[: match.start()], word[match.end():]
        pending[:0] = [head + alt + tail for alt in match.group(1).split(",")]
    return [w for w in words if w] or [""]


_PLAIN = re.compile(r"[^ \t\n;&|()<>\\'\"$`]+")  # a run of characters that mean nothing special


class _Lexer:
    def __init__(self, line: str):
        self.s, self.i, self.n = line, 0, len(line)
        self.tokens: list[tuple[str, object]] = []  # ("word", Word) or ("op", str)
        self.word: Word | None = None
        self.buf: list[str] = []  # the current word's text
        self.heredocs: list[tuple[Word, bool]] = []  # delimiters waiting for the next newline

    def run(self) -> list[tuple[str, object]]:
        s = self.s
        while self.i < self.n:
            c = s[self.i]
            if c in " \t":
                self.end_word()
                self.i += 1
            elif c == "#" and self.word is None:
                end = s.find("\n", self.i)
                self.i = self.n if end < 0 else end
            elif c in "<>" and s.startswith("(", self.i + 1) and self.word is None:
                end = _scan(s, self.i + 2, "paren")
                word = self.current()
                word.subs.append(s[self.i + 2: end])
                word.procsub = True
                self.buf.append(s[self.i: end + 1])
                self.i = end + 1
            elif c in _OPERATOR_CHARS:
                self.operator()
            else:
                self.word_part()
        self.end_word()
        return self.tokens

    def current(self) -> Word:
        if self.word is None:
            self.word, self.buf = Word(), []
        return self.word

    def end_word(self) -> None:
        word, self.word = self.word, None
        if word is None:
            return
        word.text = "".join(self.buf)
        last = self.tokens[-1] if self.tokens else None
        if last and last[0] == "op" and last[1] in ("<<", "<<-"):
            self.heredocs.append((word, last[1] == "<<-"))
        if not word.quoted and not word.subs and "{" in word.text and "," in word.text:
            self.tokens.extend(("word", Word(text)) for text in _expand_braces(word.text))
        else:
            self.tokens.append(("word", word))

    def operator(self) -> None:
        s = self.s
        if self.word is not None and s[self.i] in "<>" and not self.word.quoted and "".join(self.buf).isdigit():
            self.word = None  # "2>": a file descriptor number, not a word
        self.end_word()
        op = next(o for o in _OPERATORS if s.startswith(o, self.i))
        self.i += len(op)
        self.tokens.append(("op", op))
        if op == "\n" and self.heredocs:
            self.read_heredocs()

    def read_heredocs(self) -> None:
        for word, strip_tabs in self.heredocs:
            lines = []
            while self.i < self.n:
                end = self.s.find("\n", self.i)
                end = self.n if end < 0 else end
                line = self.s[self.i: end]
                self.i = min(end + 1, self.n)
                if (line.lstrip("\t") if strip_tabs else line) == word.text:
                    break
                lines.append(line)
            word.heredoc = "\n".join(lines)
        self.heredocs = []

    def word_part(self) -> None:
        s, i = self.s, self.i
        word = self.current()
        c = s[i]
        if c == "\\":
            if s.startswith("\n", i + 1):  # a line continuation
                self.i = i + 2
                if not self.buf and not word.quoted and not word.subs:
                    self.word = None
                return
            self.buf.append(s[i + 1: i + 2])
            word.quoted, self.i = True, i + 2
        elif c == "'":
            end = s.find("'", i + 1)
            end = self.n if end < 0 else end
            self.buf.append(s[i + 1: end])
            word.quoted, self.i = True, end + 1
        elif s.startswith("$'", i):
            end = i + 2
            while end < self.n and s[end] != "'":
                end += 2 if s[end] == "\\" else 1
            self.buf.append(_ansi_c(s[i + 2: end]))
            word.quoted, self.i = True, end + 1
        elif c == '"' or s.startswith('$"', i):
            start = i + (2 if c == "$" else 1)
            end = _scan(s, start, "dq")
            self.buf.append(_double_quoted(s[start: end], word.subs))
            word.quoted, self.i = True, end + 1
        elif s.startswith(("$(", "${"), i) or c == "`":
            raw, self.i = _substitution(s, i, word.subs)
            self.buf.append(raw)
        else:
            plain = _PLAIN.match(s, i)
            self.buf.append(plain.group() if plain else c)
            self.i = plain.end() if plain else i + 1


def _substitution(s: str, i: int, subs: list[str], depth: int = 0) -> tuple[str, int]:
    """The ``$(...)``, backtick or ``${...}`` at ``i`` as written and the index after it; the
    command lines it runs are added to ``subs``."""
    if s[i] == "`":
        end = _scan(s, i + 1, "bt")
        subs.append(s[i + 1: end].replace("\\`", "`"))
    elif s[i + 1] == "(":
        end = _scan(s, i + 2, "paren")
        subs.append(s[i + 2: end])
    else:  # ${name:-$(cmd)}: the substitutions inside a parameter expansion run too
        end = _scan(s, i + 2, "brace")
        if depth < 20:
            _double_quoted(s[i + 2: end], subs, depth + 1)
    return s[i: end + 1], end + 1


def _double_quoted(body: str, subs: list[str], depth: int = 0) -> str:
    """The text of a double-quoted string; its substitutions are added to ``subs``."""
    out: list[str] = []
    i, n = 0, len(body)
    while i < n:
        c = body[i]
        if c == "\\" and i + 1 < n:
            nxt = body[i + 1]
            out.append(nxt if nxt in '$`"\\' else "" if nxt == "\n" else c + nxt)
            i += 2
        elif body.startswith(("$(", "${"), i) or c == "`":
            raw, i = _substitution(body, i, subs, depth)
            out.append(raw)
        else:
            end = i + 1
            while end < n and body[end] not in "\\$`":
                end += 1
            out.append(body[i:end])
            i = end
    return "".join(out)


def split_commands(line: str) -> list[Command]:
    """The simple commands of ``line`` in order (see the module docstring)."""
    commands: list[Command] = []
    current = Command()
    after_pipe = False
    tokens = _Lexer(line).run()
    k = 0

    def finish() -> None:
        nonlocal current
        if current.words or current.redirs:
            commands.append(current)
        current = Command(after_pipe=after_pipe)

    while k < len(tokens):
        kind, value = tokens[k]
        k += 1
        if kind == "op" and value in REDIRECTIONS:
            if k < len(tokens) and tokens[k][0] == "word":
                current.redirs.append((str(value), tokens[k][1]))  # type: ignore[arg-type]
                k += 1
            continue
        if kind == "op":
            if value in ("|", "|&"):
                after_pipe = True
            elif value in SEPARATORS:
                after_pipe = False
            finish()  # "(" and ")" keep after_pipe: "curl x | (sh)"
            continue
        word: Word = value  # type: ignore[assignment]
        if not current.words and not word.quoted and word.text in ("{", "}"):
            finish()  # a { ...; } group: its commands are checked like any other
            continue
        current.words.append(word)
    finish()
    return commands
