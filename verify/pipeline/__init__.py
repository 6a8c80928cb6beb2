"""The pipeline at run time: the online ``monitor``, ``routing`` of training batches, stage
``promotion`` and ``export`` of proved settings to training frameworks.

Imports the ``common``, ``decide`` and ``proving`` rooms. Importing it loads none of its
modules.
"""

__all__: list[str] = []
