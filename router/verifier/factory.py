"""The one place a verifier backend is built from what a command or the service is given: the CLI's
``--verifier-url`` options (router.console) and ``serve`` (router.serve.engine) both call
``build_verifier``. A second backend is chosen here."""

from __future__ import annotations

from router.verifier.base import Verifier


def build_verifier(
    url: str | None, model: str | None = None, timeout: float | None = None, config=None
) -> Verifier | None:
    """The verifier for an endpoint's base URL (an OpenAI-compatible chat completions server), or None
    without one. ``config``: the router config, whose intents and skills the verifier's prompt lists; its
    ``verifier`` section names the endpoint when ``url`` does not."""
    options = getattr(config, "verifier", None)  # the router config's, where no URL is given
    if not url and options is not None:
        url, model, timeout = options.url, model or options.model, timeout or options.timeout
    if not url:
        return None
    from router.verifier.openai_compatible import LLMVerifier
    from router.verifier.settings import VerifierSettings

    return LLMVerifier(VerifierSettings.from_env(base_url=url, model=model, timeout=timeout), registry=config)
