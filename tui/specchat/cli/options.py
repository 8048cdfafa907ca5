"""Options several commands share."""

from __future__ import annotations

import argparse

from ..profiles import DEFAULT_PROFILE


def add_profile_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--profile", default=DEFAULT_PROFILE,
                        help=f"profile name or TOML path (default: {DEFAULT_PROFILE})")
