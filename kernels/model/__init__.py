"""kernels.model.tinylm: the policy models and how they run.

- ``tinylm``: the byte-level decoder (Flax NNX) with injected kernels, and its shipped checkpoint;
- ``hf``: Llama 3, Qwen2 and Qwen3 decoders from Hugging Face checkpoint folders;
- ``user_model``: a user's own Flax model named by a contract;
- ``decode``: generation through K_inf and teacher forcing through K_train;
- ``train``: training the shipped checkpoint (``python -m kernel_contracts.kernels.model.train``);
- ``sharding``: measurement over a device mesh.
"""
