"""A solver process started afresh: ``python -m verify.proving.solve._worker IN_FD OUT_FD``.

``verify.proving.solve.smt`` starts it where forking is unsafe (a process running JAX's threads); it
reads calls from descriptor ``IN_FD`` and answers on ``OUT_FD`` (see
``verify.proving.solve.smt.serve``).
"""

from __future__ import annotations

import sys
from multiprocessing.connection import Connection

from kernel_contracts.verify.proving.solve.smt import serve


def main(argv: list[str]) -> int:
    inbox = Connection(int(argv[0]), writable=False)
    outbox = Connection(int(argv[1]), readable=False)
    serve(inbox, outbox)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
