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

    def forge_environ(self, names: list[str]) -> dict[str, str | None]:
        """This worker process's values of the environment variables `names` (its
        /proc/PID/environ is overwritten by vLLM's process title, so it cannot be read there)."""
        import os

        return {name: os.environ.get(name) for name in names}

    def forge_reload_weights(self, path: str) -> dict[str, float]:
        """Load the checkpoint-format tensors of the safetensors file at `path` into the running
        model. (vLLM's RPC decodes untyped arguments, so tensors travel as a file in shared
        memory rather than as RPC arguments.) Returns `_forge_load`'s counts and timings."""
        import time

        from safetensors.torch import load_file

        started = time.perf_counter()
        weights = load_file(path, device="cpu")
        return self._forge_load(weights, time.perf_counter() - started)

    def forge_reload_weights_shared(self, path: str, nbytes: int, metas: list) -> dict[str, float]:
        """Load a weight-store version in place from its shared-memory file: the tensors are
        views of the mapped file (`forge_agent.weights.layout.map_shared_view`), copied once,
        into the model's parameters. Returns `_forge_load`'s counts and timings."""
        import time

        # imported here: torch and the store's layout: +1.9-2.4 s at import, measured; vLLM's
        # workers import this module by name before they need it
        from forge_agent.weights.layout import map_shared_view

        started = time.perf_counter()
        weights = map_shared_view(path, nbytes, metas)
        return self._forge_load(weights, time.perf_counter() - started)

    def forge_reload_device(self, handle: bytes, nbytes: int, metas: list) -> dict[str, float]:
        """Load a weight-store version from its slot in the trainer's device memory (the
        store's device transport, colocated on one GPU): the slot opened by its CUDA IPC handle
        (`weights.device_slots.open_slot`; on CPU its host stand-in), the tensors views of it,
        copied once into the model's parameters, device to device."""
        import time

        # imported here: torch and the store's layout: +1.9-2.4 s at import, measured; vLLM's
        # workers import this module by name before they need it
        from forge_agent.weights.device_slots import open_slot
        from forge_agent.weights.layout import TensorMeta, unpack

        started = time.perf_counter()
        buf = open_slot(handle)[:nbytes]
        weights = unpack([TensorMeta(n, d, tuple(s), o, b) for n, d, s, o, b in metas], buf)
        return self._forge_load(weights, time.perf_counter() - started)

    def forge_reload_ipc(self, payload: bytes) -> dict[str, float]:
        """Load tensors shared by CUDA IPC (`weight_files.cuda_ipc_payload`, from a process on
        this GPU: colocated) in place, from device memory: no host copy. Each handle is
        opened on this worker's device (the one GPU both processes see)."""
        import pickle
        import time

        # imported here: torch and the store's layout: +1.9-2.4 s at import, measured; vLLM's
        # workers import this module by name before they need it
        from forge_agent.weights.device_slots import open_cuda_handle

        started = time.perf_counter()
        handles = pickle.loads(payload).items()
        weights = {name: open_cuda_handle(rebuild, args) for name, (rebuild, args) in handles}
        return self._forge_load(weights, time.perf_counter() - started)

    def _forge_load(self, weights: dict[str, Any], read_s: float) -> dict[str, float]:
        """Reload `weights` (checkpoint names) in place through vLLM's `reload_weights`, which
        re-runs each layer's weight processing (on the CPU build: the oneDNN repacking of every
        linear layer). Returns the tensor count and the seconds spent reading the weights,
        reloading them, and re-preparing tied embeddings.

        On the CPU build the embedding method keeps a packed copy of the LM head; with tied
        embeddings the reload writes `embed_tokens` only, so the LM head's packed copy would go
        stale: re-preparing every embedding-method layer after the reload fixes it.
        """
        import logging
        import time

        # Rotary embeddings have no checkpoint tensors; vLLM warns about them on every reload.
        logging.getLogger("vllm.model_executor.model_loader.reload.layerwise").setLevel(
            logging.ERROR
        )
        started = time.perf_counter()
        self.model_runner.reload_weights(weights_iterator=iter(weights.items()))  # type: ignore[attr-defined]
        loaded = time.perf_counter()
        self._forge_reprepare_embedding_layers()
        done = time.perf_counter()
        return {
            "tensors": float(len(weights)),
            "read_s": read_s,
            "reload_s": loaded - started,
            "reprepare_s": done - loaded,
        }

    def _forge_reprepare_embedding_layers(self) -> None:
        from vllm.model_executor.layers.vocab_parallel_embedding import (
            UnquantizedEmbeddingMethod,
        )

        model: Any = self.model_runner.get_model()  # type: ignore[attr-defined]
        for module in model.modules():
            method = getattr(module, "quant_method", None)
            if isinstance(method, UnquantizedEmbeddingMethod):
                method.process_weights_after_loading(module)
