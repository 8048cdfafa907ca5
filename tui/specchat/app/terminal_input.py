"""Bytes from the terminal that are not UTF-8 must not stop the app.

Textual's Linux driver decodes terminal input as strict UTF-8: one invalid byte (a terminal set to Latin-1, a binary
paste, line noise on a serial link) raises in its input thread, which dies and takes the app with it
(Textualize/textual#6456, open). Until Textual fixes it, the decoder the driver asks for replaces such bytes with
U+FFFD instead. This is the one place specchat reaches into Textual beyond its public API; it goes when the issue is
fixed there.
"""

from __future__ import annotations

import codecs
import functools

from textual.drivers import linux_driver


def _replacing_decoder(encoding: str):
    return functools.partial(codecs.getincrementaldecoder(encoding), errors="replace")


def tolerate_invalid_utf8() -> None:
    linux_driver.getincrementaldecoder = _replacing_decoder
