"""Route through Router.load() in a runtime-only install, with both shipped models, a follow-up read with
the turn before it, messages in other languages (the language identifier's bundled model, offline), and
none of the training stack imported or even installed."""

import importlib.util
import sys
import time

from router import Router

for name in (None, "intent-minilm-fast"):
    start = time.perf_counter()
    router = Router.load(name)
    loaded = time.perf_counter() - start
    d = router.route("could you restart the indexing service?", role="viewer")
    assert d.intent == "ACTION" and not d.servable, d  # a viewer may not act
    follow = router.route("the same for the EU cluster", role="admin", previous=d)
    assert follow.intent == "ACTION", follow
    social = router.route("thanks, that's all", role="admin", previous=follow)
    assert social.intent is None and not social.skills.required, social
    for foreign in (
        "重启索引服务",
        "reinicia el servicio de indexación por favor",
    ):  # the language identifier
        assert router.route(foreign, role="admin").reason_code == "unsupported_language", foreign
    print(
        f"Router.load({name or ''}) in {loaded:.2f} s: {d.intent} {d.confidence:.3f}; follow-up {follow.intent}"
    )

heavy = [m for m in ("torch", "sklearn", "setfit", "transformers") if m in sys.modules]
installed = [m for m in ("torch", "sklearn", "setfit") if importlib.util.find_spec(m) is not None]
assert not heavy, f"imported in a runtime install: {heavy}"
assert not installed, f"installed without an extra: {installed}"
print("no torch, scikit-learn or setfit imported or installed")
