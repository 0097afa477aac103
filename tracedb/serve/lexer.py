"""A linear-time SQL lexer: where the code is, and where literals and comments are.

It follows DuckDB's (PostgreSQL's) scanner for what matters here: ``--``
line comments, nested ``/* */`` comments, ``'...'`` strings (``''`` inside;
``E'...'`` with backslash escapes), ``"..."`` identifiers and ``$tag$...$tag$``
dollar quotes (``$1`` is a parameter). Every loop advances through the text
with ``str.find`` or a regular expression of fixed alternatives, so the cost
is linear in the length of the text whatever it holds.

Nothing here decides whether a statement may run: the statement gate
(:mod:`tracedb.serve.gate`) asks DuckDB's own parser. The lexer only finds
the code that the PostgreSQL-compatibility rewrites may touch and the text
that the server answers itself (``SET``, ``BEGIN``, ``DECLARE`` ...).
"""

from __future__ import annotations

import re
from typing import Iterator, NamedTuple

CODE, STRING, IDENT, COMMENT = "code", "string", "ident", "comment"

# The next character that may start a literal or a comment.
_SPECIAL = re.compile(r"""['"$]|--|/\*""")
_COMMENT_MARK = re.compile(r"/\*|\*/")
_DOLLAR_TAG = re.compile(r"\$(?:[A-Za-z_\x80-\uffff][A-Za-z0-9_\x80-\uffff]*)?\$")
_E_STRING_END = re.compile(r"\\.|'", re.DOTALL)
_WORD_CHAR = re.compile(r"[A-Za-z0-9_$]")
_BLANKS = re.compile(r"\s+")


class Segment(NamedTuple):
    kind: str  # CODE, STRING, IDENT or COMMENT
    text: str


def segments(sql: str) -> Iterator[Segment]:
    """Cut ``sql`` into code, string literals, quoted identifiers and comments.

    An unterminated literal or comment runs to the end of the text (DuckDB
    then refuses the statement).
    """
    pos, n = 0, len(sql)
    code_start = 0
    while pos < n:
        m = _SPECIAL.search(sql, pos)
        if m is None:
            break
        start = m.start()
        mark = m.group(0)
        if mark == "$":
            tag = _DOLLAR_TAG.match(sql, start)
            if tag is None or (start > 0 and _WORD_CHAR.match(sql[start - 1])):
                pos = start + 1  # a parameter ($1) or part of a name (a$b)
                continue
            end = sql.find(tag.group(0), tag.end())
            end = n if end < 0 else end + len(tag.group(0))
            kind = STRING
        elif mark == "'":
            if start > 0 and sql[start - 1] in "eE" and (start < 2 or not _WORD_CHAR.match(sql[start - 2])):
                start -= 1
                end = _e_string_end(sql, start + 2)
            else:
                end = _quoted_end(sql, start + 1, "'")
            kind = STRING
        elif mark == '"':
            end = _quoted_end(sql, start + 1, '"')
            kind = IDENT
        elif mark == "--":
            newline = sql.find("\n", start)
            end = n if newline < 0 else newline
            kind = COMMENT
        else:  # /*
            end = _nested_comment_end(sql, start + 2)
            kind = COMMENT
        if start > code_start:
            yield Segment(CODE, sql[code_start:start])
        yield Segment(kind, sql[start:end])
        pos = code_start = end
    if code_start < n:
        yield Segment(CODE, sql[code_start:])


def _quoted_end(sql: str, pos: int, quote: str) -> int:
    """End of a literal opened before ``pos``; a doubled quote stays inside."""
    while True:
        end = sql.find(quote, pos)
        if end < 0:
            return len(sql)
        if sql.startswith(quote, end + 1):
            pos = end + 2
            continue
        return end + 1


def _e_string_end(sql: str, pos: int) -> int:
    while True:
        m = _E_STRING_END.search(sql, pos)
        if m is None:
            return len(sql)
        if m.group(0) == "'":
            if sql.startswith("'", m.end()):
                pos = m.end() + 1
                continue
            return m.end()
        pos = m.end()


def _nested_comment_end(sql: str, pos: int) -> int:
    depth = 1
    while depth:
        m = _COMMENT_MARK.search(sql, pos)
        if m is None:
            return len(sql)
        depth += 1 if m.group(0) == "/*" else -1
        pos = m.end()
    return pos


def split_statements(sql: str) -> list[str]:
    """``sql`` cut at the semicolons of its code (each piece keeps its text)."""
    pieces: list[str] = []
    current: list[str] = []
    for seg in segments(sql):
        if seg.kind != CODE or ";" not in seg.text:
            current.append(seg.text)
            continue
        parts = seg.text.split(";")
        for part in parts[:-1]:
            current.append(part)
            pieces.append("".join(current))
            current = []
        current.append(parts[-1])
    pieces.append("".join(current))
    return [p for p in pieces if significant(p)]


def significant(sql: str) -> str:
    """The statement as the server matches it: comments dropped, blanks collapsed,
    no trailing semicolons; literals and quoted names unchanged."""
    out = []
    for seg in segments(sql):
        if seg.kind == COMMENT:
            out.append(" ")
        elif seg.kind == CODE:
            out.append(_BLANKS.sub(" ", seg.text))
        else:
            out.append(seg.text)
    return "".join(out).strip().rstrip(";").strip()


def compact(sql: str) -> str:
    """``sql`` with each run of blanks in its code made one blank (a newline where
    the run had one, so that ``--`` comments still end), literals and comments kept.

    The compatibility rewrites run on compacted text, so that no pattern of theirs
    meets a long run of blanks.
    """
    out = []
    for seg in segments(sql):
        if seg.kind == CODE:
            out.append(_BLANKS.sub(lambda m: "\n" if "\n" in m.group(0) else " ", seg.text))
        else:
            out.append(seg.text)
    return "".join(out)
