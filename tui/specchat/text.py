"""Text from outside — arguments, pipes, terminals — as valid Unicode.

Python keeps bytes that are not UTF-8 as lone surrogates (``surrogateescape``: arguments, prompt-toolkit's input) that
cannot be tokenized, stored in SQLite or printed; here each such byte becomes U+FFFD, once, where the text comes in.
"""

from __future__ import annotations


def valid_text(text: str) -> str:
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogatepass").decode("utf-8", "replace")


def is_number(text: str) -> bool:
    """Whether ``text`` (spaces around it aside) is a number ``int()`` reads: ASCII digits only. ``str.isdigit`` also
    accepts "²" or "①", on which ``int`` raises."""
    text = text.strip()
    return text.isascii() and text.isdigit()
