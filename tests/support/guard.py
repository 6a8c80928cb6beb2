"""``finishes``: run a call that must not block (a FIFO read, a device read) in a thread, and
fail the test, rather than hang it, when it has not returned within a time guard."""

from __future__ import annotations

import contextlib
import os
import threading

# far above what each call takes (well under a second); only a hang reaches it
GUARD_SECONDS = 60


def finishes(call, *fifos, seconds: float = GUARD_SECONDS):
    """``call()``'s result, or the exception it raised (returned, not raised), once it returned;
    a failed assertion when it still runs after ``seconds``. Each of ``fifos`` is then opened
    for writing and closed, so that a reader blocked on one gets end of file and its thread
    ends."""
    outcome: list = []

    def run():
        try:
            outcome.append(call())
        except BaseException as err:  # handed to the test as the outcome
            outcome.append(err)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(seconds)
    if worker.is_alive():
        for fifo in fifos:
            with contextlib.suppress(OSError):  # no reader left: nothing to release
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        raise AssertionError(f"the call still ran after {seconds} s (it blocked)")
    return outcome[0]
