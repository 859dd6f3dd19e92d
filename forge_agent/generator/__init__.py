"""The policy's sampler: vLLM behind a token-in/token-out API with versioned weight reload.

`import forge_agent.generator` does not import vLLM; the engine imports it when it starts.
"""

from forge_agent.generator.engine import GeneratorConfig, GeneratorError, SamplingConfig, VLLMEngine

__all__ = ["Generator", "GeneratorConfig", "GeneratorError", "SamplingConfig", "VLLMEngine"]


def __getattr__(name: str):
    if name == "Generator":  # the Monarch actor; imported lazily so the engine API stays light
        from forge_agent.generator.actor import Generator

        return Generator
    raise AttributeError(name)
