"""The messages behind recent Decisions, so that a follow-up sent with only its previous Decision
(``previous: {"decision": D}``) is logged with the previous message too.

A Decision carries no message text (it is returned to callers and logged as it is). The service keeps, per
worker process, the last ``size`` routed messages under the sha256 of the Decision JSON it returned for
each; a client that sends that Decision back unchanged, as the API asks, sends the same bytes, and the
decision log records the message under ``previous_message``. Routing is not changed by it: the
follow-up is read after the Decision alone, as sent. With several workers, a follow-up that reaches
another worker than its previous turn finds nothing, and its record holds the previous turn's intents
only (``previous_intents``), as before. The memory is kept only with a decision log.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Sequence

DEFAULT_SIZE = 10_000


def decision_key(decision_json: str | bytes) -> bytes:
    data = decision_json.encode() if isinstance(decision_json, str) else decision_json
    return hashlib.sha256(data).digest()


class TurnMemory:
    """The last ``size`` messages, by the Decision returned for each. Thread-safe."""

    def __init__(self, size: int = DEFAULT_SIZE) -> None:
        self.size = size
        self._messages: OrderedDict[bytes, str] = OrderedDict()
        self._lock = threading.Lock()

    def remember(self, decision_jsons: Sequence[bytes], texts: Sequence[str]) -> None:
        with self._lock:
            for j, text in zip(decision_jsons, texts, strict=True):
                key = decision_key(j)
                self._messages[key] = text
                self._messages.move_to_end(key)
            while len(self._messages) > self.size:
                self._messages.popitem(last=False)

    def recall(self, decision) -> str | None:
        """The message the service routed into ``decision`` (a Decision), if this process remembers it."""
        with self._lock:
            return self._messages.get(decision_key(decision.model_dump_json()))
