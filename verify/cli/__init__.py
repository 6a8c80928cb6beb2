"""The front door: ``python -m verify`` and its subcommands (``commands``: a dispatch table
from the first word to the room that does the work; every parser is built by
``verify.common.arguments``). No room imports the command line."""

from kernel_contracts.verify.cli.commands import SUBCOMMANDS, main

__all__ = ["SUBCOMMANDS", "main"]
