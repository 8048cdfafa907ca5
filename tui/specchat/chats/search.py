"""Finding a chat by what was said in it: the text SQLite's FTS5 indexes, the query a user's words make, the hit shown.

FTS5's ``unicode61`` tokenizer splits words at spaces and punctuation and folds case and accents ("codigo" finds
"código"), but it takes a run of Chinese or Japanese characters, written without spaces, for one word. Each such
character is therefore indexed as a word of its own, and a query's run of them is searched as a phrase: "猫" finds
"猫是一种猫", and "一种猫" finds it too. Every word of a query must be in the message; the last may be the start of a
word ("decod" finds "decodificación").
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

# Scripts written without spaces between words: CJK ideographs (and their extensions), kana, CJK punctuation.
UNSPACED = re.compile(r"([\u3000-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0003134f])")
WORD = re.compile(r"\w+", re.UNICODE)
TOKENIZER = "unicode61 remove_diacritics 2"


def indexed_text(text: str) -> str:
    """A message's text as the index holds it: each unspaced-script character a word of its own."""
    return UNSPACED.sub(r" \1 ", text)


def fts_query(words: str) -> str | None:
    """The FTS5 query for what a user typed (every word, the last also as a prefix); None when it holds no word.
    Words are quoted: a user's "-", ":" or "*" is text, never FTS5 syntax."""
    terms = [term for term in WORD.findall(words) if any(c.isalnum() for c in term)]  # "_" alone is no word
    if not terms:
        return None
    quoted = [f'"{" ".join(indexed_text(term).split())}"' for term in terms]  # a run of ideographs: a phrase
    if not UNSPACED.match(terms[-1][-1]):
        quoted[-1] += "*"
    return " AND ".join(quoted)


def _folded(text: str) -> str:
    """Lower case without accents, one character for one: positions in it are positions in ``text``."""
    out = []
    for ch in text:
        base = unicodedata.normalize("NFD", ch)[0] if not UNSPACED.match(ch) else ch
        out.append(base.lower() if len(base.lower()) == 1 else ch)
    return "".join(out)


@dataclass(frozen=True)
class Hit:
    """A message that matched — its chat, its place in the chat, its text — or a version the chat keeps unshown
    (``role`` "version", ``ordinal`` its place among the versions at ``position``, ``content`` its messages' text)."""

    chat_id: int
    title: str
    position: int
    role: str
    content: str
    ordinal: int | None = None

    @property
    def where(self) -> str:
        """Where in its chat: "user #1", "assistant #2", or "a version of #3 not shown"."""
        if self.ordinal is not None:
            return f"a version of #{self.position + 1} not shown"
        return f"{self.role} #{self.position + 1}"

    def excerpt(self, words: str, width: int = 100) -> tuple[str, list[tuple[int, int]]]:
        """The part of the message around its first match, on one line, and where the matched words are in it."""
        line = " ".join(self.content.split())
        spans = matches(line, words)
        start = max(0, (spans[0][0] if spans else 0) - width // 3)
        end = min(len(line), start + width)
        start = max(0, min(start, end - width))
        prefix, suffix = ("…" if start else ""), ("…" if end < len(line) else "")
        shift = len(prefix) - start
        shown = [(a + shift, b + shift) for a, b in spans if a >= start and b <= end]
        return prefix + line[start:end] + suffix, shown


def matches(text: str, words: str) -> list[tuple[int, int]]:
    """Where the query's words are in ``text``, as (start, end) spans, accents and case aside (the last word also
    as the start of a longer one), in order."""
    folded, terms = _folded(text), _terms(words)
    return sorted({span for i, term in enumerate(terms) for span in _spans(folded, term, i == len(terms) - 1)})


def holds(text: str, words: str) -> bool:
    """Whether ``text`` holds every word of the query, as the index finds it."""
    folded, terms = _folded(text), _terms(words)
    return bool(terms) and all(_spans(folded, term, i == len(terms) - 1) for i, term in enumerate(terms))


def _terms(words: str) -> list[str]:
    return [_folded(t) for t in WORD.findall(words) if any(c.isalnum() for c in t)]


def _spans(folded: str, term: str, last: bool) -> list[tuple[int, int]]:
    spans = []
    for found in re.finditer(re.escape(term), folded):
        a, b = found.span()
        if UNSPACED.search(term):  # characters of unspaced scripts are words of their own
            spans.append((a, b))
            continue
        if a > 0 and folded[a - 1].isalnum():
            continue
        if last:
            while b < len(folded) and folded[b].isalnum():
                b += 1
        elif b < len(folded) and folded[b].isalnum():
            continue
        spans.append((a, b))
    return spans
