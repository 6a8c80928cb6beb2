"""``python -m verify``: the only place that exits."""

import sys

from kernel_contracts.verify.cli.commands import main

if __name__ == "__main__":
    sys.exit(main())
