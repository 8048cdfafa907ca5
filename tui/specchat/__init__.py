"""specchat: a terminal chat that makes speculative decoding visible and controllable."""

__version__ = "0.1.0"
