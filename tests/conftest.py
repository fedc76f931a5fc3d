import os
import shutil
from pathlib import Path

import pytest

from tests.shipped_models import committed

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).parent / "fixtures"
TINY = FIXTURES / "tiny"
# the shipped models as committed, even after `intent-router build` has retrained models/ in place
SHIPPED = committed("models/intent-minilm")
FAST = committed("models/intent-minilm-fast")
os.environ["INTENT_ROUTER_MODEL"] = str(SHIPPED)  # what Router.load() and the CLI route with by default
SHIPPED_INTENTS = ("SEARCH", "REASONING", "PLANNING", "MEMORY", "ACTION")  # the shipped model's, in its order


def tiny_config(**overrides):
    from training.train_config import TrainConfig

    base = dict(
        name="tiny",
        train_file=TINY / "train.jsonl",
        dev_file=TINY / "dev.jsonl",
        test_file=TINY / "test.jsonl",
        compound_train_file=TINY / "compound" / "train.jsonl",
        compound_dev_file=TINY / "compound" / "dev.jsonl",
        compound_test_file=TINY / "compound" / "test.jsonl",
        max_steps=60,
        batch_size=16,
        seed=7,
    )
    base.update(overrides)
    return TrainConfig(**base)


@pytest.fixture(scope="session")
def tiny_trained(tmp_path_factory):
    """A real SetFit model trained for a handful of steps on the fixture corpus (about 20 s on 2 cores)."""
    from training.fit.train import train

    out = tmp_path_factory.mktemp("tiny-model")
    manifest = train(tiny_config(), out, report=lambda _: None, show_progress=False)
    return out, manifest


@pytest.fixture(scope="session")
def tiny_exported(tiny_trained, tmp_path_factory):
    """The tiny model exported to fp32 and int8 ONNX with its parity check."""
    from training.export.exporter import export_model

    src, _ = tiny_trained
    out = tmp_path_factory.mktemp("tiny-export") / "model"
    shutil.copytree(src, out)
    manifest = export_model(out, parity_file=TINY / "test.jsonl", report=lambda _: None)
    return out, manifest


@pytest.fixture
def model_copy(tiny_exported, tmp_path):
    """A throw-away copy of the exported tiny model that a test may damage."""
    src, _ = tiny_exported
    dst = tmp_path / "model"
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("checkpoint"))
    return dst


@pytest.fixture(scope="session", params=[SHIPPED, FAST], ids=["default", "fast"])
def shipped_router(request):
    """Each shipped model: the design record's cases hold for the fast one too."""
    from router import Router

    assert (request.param / "manifest.json").is_file(), f"the shipped model is missing from {request.param}"
    return Router.load(request.param)


VAGUE = (
    "hmm maybe later",
    "and for next week?",
    "the thing from before",
    "ok so what now",
    "that one",
    "not sure",
    "hello there",
    "what about the other one",
    "same for marketing",
    "and then?",
)


def below_threshold(router, *candidates: str) -> str:
    """The first message the real classifier scores below the router's threshold.

    Tests force the verifier/fallback path with threshold=1.0; the tiny fixture model is overconfident
    and gives exactly 1.0 (float32) to many messages, so the message must be picked, not assumed.
    """
    for text in candidates or VAGUE:
        if router.classifier.classify(text).confidence < router.threshold:
            return text
    raise AssertionError(f"the classifier is at or above {router.threshold} on all of {candidates or VAGUE}")


TRAINING_FIXTURES = {"tiny_trained", "tiny_exported", "model_copy"}


def pytest_collection_modifyitems(items):
    """Anything that needs the session's trained or exported tiny model is slow, wherever it is defined
    (the tests above carry the mark explicitly; this catches the rest)."""
    for item in items:
        if TRAINING_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)


# ------------------------------------------------------------- verifier tests: real loopback servers
@pytest.fixture
def openai_server():
    """A started OpenAIServer on 127.0.0.1; stopped after the test."""
    from tests.openai_server import OpenAIServer

    with OpenAIServer().start() as server:
        yield server


@pytest.fixture
def llama_cpp_server():
    """An OpenAIServer that rejects response_format json_schema with HTTP 500, like llama-cpp-python."""
    from tests.openai_server import OpenAIServer

    with OpenAIServer(reject=("json_schema",)).start() as server:
        yield server


@pytest.fixture
def closed_port() -> int:
    from tests.openai_server import free_port

    return free_port()


@pytest.fixture
def make_verifier():
    """Make LLMVerifiers (test key, 1 s timeout) for a server or URL; closed after the test."""
    from router.verifier import LLMVerifier, VerifierSettings
    from tests.openai_server import OpenAIServer
    from tests.verifier_support import KEY

    made = []

    def make(target, **kw):
        base = target.base_url if isinstance(target, OpenAIServer) else target
        kw.setdefault("timeout", 1.0)
        kw.setdefault("model", "test-model")
        kw.setdefault("api_key", KEY)
        v = LLMVerifier(VerifierSettings(base_url=base, **kw))
        made.append(v)
        return v

    yield make
    for v in made:
        v.close()
