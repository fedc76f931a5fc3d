"""Runtime intent router: ONNX classification, skills, RBAC, threshold and fallback.

Imports only onnxruntime, tokenizers, numpy and pydantic (httpx lazily, for the LLM verifier).
"""

from router.intents import CONTINUATION, OUT_OF_SCOPE

__all__ = ["CONTINUATION", "OUT_OF_SCOPE", "Decision", "Router"]


def __getattr__(name):  # lazy, so `import router` stays cheap
    if name == "Router":
        from router.routing import Router

        return Router
    if name == "Decision":
        from router.decision import Decision

        return Decision
    raise AttributeError(name)
