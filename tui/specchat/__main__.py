"""``python -m specchat``: the same as the ``specchat`` command."""

import sys

from .cli import main

sys.exit(main())
