"""``python -m verify``: the only place that exits."""

import sys

from verify.cli import main

if __name__ == "__main__":
    sys.exit(main())
