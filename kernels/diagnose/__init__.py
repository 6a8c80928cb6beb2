"""kernels.diagnose: where in a model two kernels part, and what-if experiments.

- ``sites``: the matmul and attention sites of a model;
- ``transform``: ``on_kernel``, any JAX function on an emulated kernel;
- ``localization``: per-site and per-layer divergence, and replay;
- ``faults``: injected faults that localization must find;
- ``rescale``: matmuls rescaled to test a scaling hypothesis.
"""
