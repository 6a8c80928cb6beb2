"""kernel_contracts: training–inference kernel contracts, their bound chain, proofs and evidence.

The repository keeps one folder per stage (``contracts``, ``kernels``, ``evidence``, ``bounds``,
``verify``); the installed distribution maps each into this namespace, so that none of those
generic names is claimed at the top level of an environment (transformers ≥ 5 requires another
project's ``kernels``). Import the stages from here::

    from kernel_contracts import bounds, contracts, verify

Importing this package imports none of them.
"""

__all__: list[str] = []
