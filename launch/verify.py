"""``python -m verify`` from any directory: the one top-level name the distribution installs
besides ``kernel_contracts``. It holds no code of the toolkit and forwards to
``kernel_contracts.verify``'s command line. From the repository root, the folder ``verify/`` is
found first and its ``__main__`` forwards the same way."""

import sys

from kernel_contracts.verify.cli.commands import main

if __name__ == "__main__":
    sys.exit(main())
