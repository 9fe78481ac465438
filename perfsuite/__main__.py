"""``python -m perfsuite``: the same as the ``perfsuite`` command."""

from __future__ import annotations

import sys

from perfsuite.cli import main

if __name__ == "__main__":
    sys.exit(main())
