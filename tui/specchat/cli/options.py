"""Options several commands share."""

from __future__ import annotations

import argparse

from ..profiles import DEFAULT_PROFILE


def add_profile_option(parser: argparse.ArgumentParser, *, remembered: bool = False) -> None:
    """``remembered``: left out, the profile is the one used last (the app's), else the default."""
    if remembered:
        parser.add_argument("--profile", default=None,
                            help=f"profile name or TOML path (default: the one used last, else {DEFAULT_PROFILE})")
    else:
        parser.add_argument("--profile", default=DEFAULT_PROFILE,
                            help=f"profile name or TOML path (default: {DEFAULT_PROFILE})")
