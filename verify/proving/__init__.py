"""Proving: obligations and their z3 discharge (``obligations``, ``solve``, ``replay``,
``cache``, ``kernel_obligations``), a whole run (``runner``), its reports (``render``), the
re-checker (``check``) and synthesis (``synth``).

Imports the ``common`` and ``decide`` rooms only. Importing it loads none of its modules.
"""

__all__: list[str] = []
