"""HTTP service for the router (extra ``serve``: FastAPI, uvicorn, prometheus-client).

``create_app(ServeSettings(...))`` builds the ASGI app; ``run(settings)`` serves it with uvicorn, in this
process or in ``settings.workers`` worker processes (router.serve.workers).
Nothing here is imported by ``import router``: the runtime install stays without FastAPI.
"""

from router.serve.settings import ServeSettings

__all__ = ["ServeSettings", "create_app", "run"]


def __getattr__(name):
    if name == "create_app":
        from router.serve.app import create_app

        return create_app
    if name == "run":
        from router.serve.workers import run

        return run
    raise AttributeError(name)
