"""The pipeline at run time: the online ``monitor``, ``routing`` of training batches, stage
``promotion``, ``export`` of proved settings to training frameworks, and the ``starter``
contract that ``init`` writes for a named setup.

Imports the ``common``, ``decide`` and ``proving`` rooms. Importing it loads none of its
modules.
"""

__all__: list[str] = []
