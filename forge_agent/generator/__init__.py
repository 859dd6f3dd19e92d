"""The policy's sampler: vLLM behind a token-in/token-out API with versioned weight reload.

`import forge_agent.generator` loads only the configs; the engine (torch) and the actor
(Monarch) load on first use, and vLLM when the engine starts.
"""

from forge_agent.generator.config import GeneratorConfig, SamplingConfig
from forge_agent.lazy import lazy_exports

__all__ = ["Generator", "GeneratorConfig", "GeneratorError", "SamplingConfig", "VLLMEngine"]

__getattr__ = lazy_exports(
    __name__,
    {
        "Generator": "forge_agent.generator.actor",
        "GeneratorError": "forge_agent.generator.engine_args",
        "VLLMEngine": "forge_agent.generator.vllm_engine",
    },
)
