"""API keys -> roles. The key file stores SHA-256 hashes of keys, never the keys.

Key file (YAML or JSON)::

    keys:
      - id: billing-agent            # shown in logs instead of the key
        sha256: 9f86d081884c7d65...  # hex SHA-256 of the key
        roles: [viewer, analyst]
      - id: deploy-bot
        sha256: 60303ae22b998861...
        admin: true                  # may call the admin endpoints (POST /admin/reload)
        roles: []                    # an admin key may hold no role

Keys are random 256-bit tokens (``python -m router.serve.auth new --id NAME --roles a,b``), so one
fast hash is enough: there is nothing to brute-force, unlike a password. A request sends its key as
``Authorization: Bearer KEY`` or ``X-API-Key: KEY`` and names a role in its body; a role the key does
not hold is refused (403) and logged with the key's id. Only a key with ``admin: true`` may call the
admin endpoints; any other key gets 403 there.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import secrets
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

HEX64 = re.compile(r"^[0-9a-f]{64}$")
KEY_PREFIX = "ir_"


class KeyFileError(ValueError):
    pass


@dataclass(frozen=True)
class Principal:
    key_id: str
    roles: frozenset[str]
    admin: bool = False


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def new_key() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


class KeyStore:
    def __init__(self, entries: dict[str, Principal]) -> None:
        self._by_hash = entries

    @classmethod
    def load(cls, path: str | Path) -> KeyStore:
        path = Path(path)
        try:
            raw = yaml.safe_load(path.read_text(encoding="utf-8"))
        except (OSError, yaml.YAMLError) as e:
            raise KeyFileError(f"{path}: cannot read the key file: {e}") from e
        if not isinstance(raw, dict) or not isinstance(raw.get("keys"), list):
            raise KeyFileError(f"{path}: expected a mapping with a 'keys' list")
        entries: dict[str, Principal] = {}
        ids: set[str] = set()
        for i, item in enumerate(raw["keys"]):
            where = f"{path}: keys[{i}]"
            if not isinstance(item, dict):
                raise KeyFileError(f"{where}: expected a mapping with id, sha256, roles")
            unknown = set(item) - {"id", "sha256", "roles", "admin"}
            if unknown:
                raise KeyFileError(
                    f"{where}: unknown field(s) {sorted(unknown)} (plain keys are not accepted)"
                )
            kid, digest, roles = item.get("id"), str(item.get("sha256", "")).lower(), item.get("roles")
            admin = item.get("admin", False)
            if not isinstance(kid, str) or not kid.strip():
                raise KeyFileError(f"{where}: 'id' must be a non-empty string")
            if kid in ids:
                raise KeyFileError(f"{where}: duplicate id {kid!r}")
            if not HEX64.match(digest):
                raise KeyFileError(f"{where} ({kid}): 'sha256' must be 64 hex digits")
            if digest in entries:
                raise KeyFileError(f"{where} ({kid}): the same key hash appears twice")
            if not isinstance(admin, bool):
                raise KeyFileError(f"{where} ({kid}): 'admin' must be true or false")
            if roles is None:
                roles = []
            if not isinstance(roles, list) or not all(isinstance(r, str) and r for r in roles):
                raise KeyFileError(f"{where} ({kid}): 'roles' must be a list of role names")
            if not roles and not admin:
                raise KeyFileError(
                    f"{where} ({kid}): 'roles' must name at least one role (only an admin key may hold none)"
                )
            ids.add(kid)
            entries[digest] = Principal(kid, frozenset(roles), admin)
        return cls(entries)

    def roles_unknown_to(self, known: set[str]) -> dict[str, list[str]]:
        """Roles granted in the key file that the router config does not define, by key id."""
        out = {}
        for p in self._by_hash.values():
            missing = sorted(p.roles - known)
            if missing:
                out[p.key_id] = missing
        return out

    def authenticate(self, key: str | None) -> Principal | None:
        if not key:
            return None
        # A lookup by hash: timing can reveal at most a prefix of the hash, which does not help find a key.
        return self._by_hash.get(hash_key(key))

    def __len__(self) -> int:
        return len(self._by_hash)


def key_from_headers(headers) -> str | None:
    auth = headers.get("authorization")
    if auth:
        scheme, _, value = auth.partition(" ")
        if scheme.lower() == "bearer" and value.strip():
            return value.strip()
    key = headers.get("x-api-key")
    return key.strip() if key else None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m router.serve.auth", description="Make API keys.")
    sub = p.add_subparsers(dest="cmd", required=True)
    n = sub.add_parser("new", help="print a new key (once) and its key-file entry")
    n.add_argument("--id", required=True)
    n.add_argument("--roles", default="", help="comma-separated role names")
    n.add_argument("--admin", action="store_true", help="the key may call the admin endpoints")
    h = sub.add_parser("hash", help="print the sha256 of a key read from stdin")
    del h
    a = p.parse_args(argv)
    if a.cmd == "new":
        roles = [r.strip() for r in a.roles.split(",") if r.strip()]
        if not roles and not a.admin:
            p.error("give --roles (a key that is not --admin needs at least one role)")
        key = new_key()
        print(f"key (give it to the client, it is not stored): {key}", file=sys.stderr)
        entry = {"id": a.id, "sha256": hash_key(key), "roles": roles}
        print(json.dumps({**entry, "admin": True} if a.admin else entry))
    else:
        print(hash_key(sys.stdin.read().strip()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
