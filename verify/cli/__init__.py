"""The command line (``commands``: ``python -m verify`` and its subcommands) and where it writes
(``outputs``: every target checked before any work, all written at the end or none)."""

from verify.cli.commands import SUBCOMMANDS, main
from verify.cli.outputs import OutputError, prepare

__all__ = ["SUBCOMMANDS", "OutputError", "main", "prepare"]
