"""Methods mixed into vLLM's worker class (`worker_extension_cls`), called by `collective_rpc`.

They run inside vLLM's worker process, next to the model, and are the only place the generator
touches vLLM's model object. Kept free of top-level vLLM imports so the module imports cheaply.
"""

from __future__ import annotations

from typing import Any


class WeightSyncExtension:
    """In-place weight reload for the generator (mixed into vLLM's `Worker`)."""

    def forge_param_shapes(self) -> dict[str, tuple[list[int], str]]:
        """Checkpoint-format names are not the kernel-format names; the generator checks the
        trainer's state dict against the Hugging Face config instead. This lists the loaded
        model's parameter shapes for diagnostics."""
        model = self.model_runner.get_model()  # type: ignore[attr-defined]
        return {n: (list(p.shape), str(p.dtype)) for n, p in model.named_parameters()}

    def forge_reload_weights(self, path: str) -> int:
        """Load the checkpoint-format tensors of the safetensors file at `path` into the running
        model; returns how many were loaded. (vLLM's RPC decodes untyped arguments, so tensors
        travel as a file in shared memory rather than as RPC arguments.)

        On the CPU build the embedding method keeps a packed copy of the LM head; with tied
        embeddings the reload writes `embed_tokens` only, so the LM head's packed copy would go
        stale. Re-preparing every embedding-method layer after the reload fixes both cases.
        """
        import logging

        from safetensors.torch import load_file

        # Rotary embeddings have no checkpoint tensors; vLLM warns about them on every reload.
        logging.getLogger("vllm.model_executor.model_loader.reload.layerwise").setLevel(
            logging.ERROR
        )
        weights = load_file(path, device="cpu")
        self.model_runner.reload_weights(weights_iterator=iter(weights.items()))  # type: ignore[attr-defined]
        self._forge_reprepare_embedding_layers()
        return len(weights)

    def forge_reload_weights_shared(self, path: str, nbytes: int, metas: list) -> int:
        """Load a weight-store version in place from its shared-memory file: the tensors are
        views of the mapped file (`forge_agent.weight_layout.map_shared_view`), copied once,
        into the model's parameters. Returns how many were loaded."""
        import logging

        from forge_agent.weight_layout import map_shared_view

        logging.getLogger("vllm.model_executor.model_loader.reload.layerwise").setLevel(
            logging.ERROR
        )
        weights = map_shared_view(path, nbytes, metas)
        self.model_runner.reload_weights(weights_iterator=iter(weights.items()))  # type: ignore[attr-defined]
        self._forge_reprepare_embedding_layers()
        return len(weights)

    def _forge_reprepare_embedding_layers(self) -> None:
        from vllm.model_executor.layers.vocab_parallel_embedding import (
            UnquantizedEmbeddingMethod,
        )

        model: Any = self.model_runner.get_model()  # type: ignore[attr-defined]
        for module in model.modules():
            method = getattr(module, "quant_method", None)
            if isinstance(method, UnquantizedEmbeddingMethod):
                method.process_weights_after_loading(module)
