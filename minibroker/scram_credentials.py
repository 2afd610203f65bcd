"""SASL/SCRAM users created and removed while the broker runs (KIP-554: DescribeUserScramCredentials
and AlterUserScramCredentials), kept across restarts in `scram-credentials.json` in the data dir.

As Kafka's ScramControlManager and ScramImage, for the broker's `UserStore`:

- an upsertion carries the salted password (Hi(password, salt, iterations), computed by the client),
  the salt and the iteration count; the broker keeps only what SCRAM needs to check a login, the
  stored key and the server key (never a password, never the salted password);
- errors per user: UNACCEPTABLE_CREDENTIAL for an empty name, or fewer than 4096 or more than 16384
  iterations; UNSUPPORTED_SASL_MECHANISM for a mechanism other than SCRAM-SHA-256 (1) and
  SCRAM-SHA-512 (2); RESOURCE_NOT_FOUND to delete a credential that does not exist;
  DUPLICATE_RESOURCE when a request alters one user twice (whatever the mechanisms);
- describing lists each user's mechanisms and iteration counts (never keys); unknown users
  RESOURCE_NOT_FOUND, a user named twice DUPLICATE_RESOURCE; no names means every user.

Users from `sasl.users` start with SCRAM credentials derived from their passwords (and keep PLAIN,
which these APIs do not touch); a credential set here replaces theirs for that mechanism, and one
deleted here stays deleted after a restart.

File layout (JSON, written atomically, mode 0600): {"version": 1, "credentials": {user: {mechanism:
{"salt", "stored_key", "server_key" (base64), "iterations"}}}, "removed": {user: [mechanism]}} where
"removed" lists the `sasl.users` credentials deleted at runtime. A file that cannot be read stops
the broker with a message naming it.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import os
from pathlib import Path
from typing import Any, Iterable

from minibroker.sasl import ScramCredential, UserStore
from minibroker.protocol.errors import ErrorCode
from minibroker.storage.files import write_atomically

log = logging.getLogger(__name__)

SCRAM_CREDENTIALS_FILE = "scram-credentials.json"
MECHANISMS = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}  # Kafka's ScramMechanism types
MECHANISM_TYPES = {name: type_ for type_, name in MECHANISMS.items()}
MIN_ITERATIONS = 4096  # Kafka's ScramMechanism.minIterations, both hashes
MAX_ITERATIONS = 16384  # ScramControlManager.MAX_ITERATIONS


_TWICE = "A user credential cannot be altered twice in the same request"


class ScramCredentialStore:
    """The runtime changes to a UserStore's SCRAM credentials, and their file."""

    def __init__(self, users: UserStore, path: Path) -> None:
        self.users = users
        self.path = path
        self._static = set(users.scram_credentials())  # (mechanism, user) from sasl.users
        self._credentials: dict[tuple[str, str], ScramCredential] = {}
        self._removed: set[tuple[str, str]] = set()

    @classmethod
    def open(cls, users: UserStore, data_dir: Path) -> ScramCredentialStore:
        store = cls(users, Path(data_dir) / SCRAM_CREDENTIALS_FILE)
        if store.path.exists():
            try:
                store._load(json.loads(store.path.read_bytes()))
            except (OSError, ValueError, KeyError, TypeError, AttributeError, binascii.Error) as exc:
                raise ValueError(
                    f"{store.path}: unreadable SCRAM credentials ({exc!r}); restore the file, or remove it "
                    "to keep only the users of sasl.users") from None
            log.info("loaded %d SCRAM credential(s) from %s", len(store._credentials), store.path)
        return store

    def _load(self, state: dict) -> None:
        if state.get("version") != 1:
            raise ValueError("not a version 1 SCRAM credentials file")
        for user, mechanisms in state["credentials"].items():
            for mechanism, fields in mechanisms.items():
                if mechanism not in MECHANISM_TYPES or not isinstance(user, str):
                    raise ValueError(f"bad entry {user!r}/{mechanism!r}")
                credential = ScramCredential(
                    base64.b64decode(fields["salt"], validate=True),
                    int(fields["iterations"]),
                    base64.b64decode(fields["stored_key"], validate=True),
                    base64.b64decode(fields["server_key"], validate=True),
                )
                self._credentials[(mechanism, user)] = credential
                self.users.set_scram_credential(mechanism, user, credential)
        for user, mechanisms in state.get("removed", {}).items():
            for mechanism in mechanisms:
                self._removed.add((mechanism, user))
                if (mechanism, user) not in self._credentials:
                    self.users.remove_scram_credential(mechanism, user)

    def _persist(self, credentials: dict[tuple[str, str], ScramCredential], removed: set[tuple[str, str]]) -> None:
        by_user: dict[str, dict] = {}
        for (mechanism, user), c in sorted(credentials.items()):
            by_user.setdefault(user, {})[mechanism] = {
                "salt": base64.b64encode(c.salt).decode(),
                "stored_key": base64.b64encode(c.stored_key).decode(),
                "server_key": base64.b64encode(c.server_key).decode(),
                "iterations": c.iterations,
            }
        removed_by_user: dict[str, list[str]] = {}
        for mechanism, user in sorted(removed):
            removed_by_user.setdefault(user, []).append(mechanism)
        state = {"version": 1, "credentials": by_user, "removed": removed_by_user}
        write_atomically(self.path, json.dumps(state, indent=1, sort_keys=True).encode() + b"\n")
        os.chmod(self.path, 0o600)

    # ---- DescribeUserScramCredentials -------------------------------------------------------------

    def describe(self, names: list[str] | None) -> list[dict]:
        """One result per user (Kafka's ScramImage.describe)."""
        by_user: dict[str, list[dict]] = {}
        for (mechanism, user), credential in sorted(self.users.scram_credentials().items(),
                                                    key=lambda item: MECHANISM_TYPES.get(item[0][0], 0)):
            if mechanism in MECHANISM_TYPES:
                by_user.setdefault(user, []).append(
                    {"mechanism": MECHANISM_TYPES[mechanism], "iterations": credential.iterations})
        if not names:
            return [_described(user, ErrorCode.none, None, infos) for user, infos in sorted(by_user.items())]
        results = []
        for user in dict.fromkeys(names):
            if names.count(user) > 1:
                results.append(_described(user, ErrorCode.duplicate_resource,
                                          f"Cannot describe SCRAM credentials for the same user twice in a single request: {user}"))
            elif user not in by_user:
                results.append(_described(user, ErrorCode.resource_not_found,
                                          f"Attempt to describe a user credential that does not exist: {user}"))
            else:
                results.append(_described(user, ErrorCode.none, None, by_user[user]))
        return results

    # ---- AlterUserScramCredentials ------------------------------------------------------------------

    def alter(self, deletions: Iterable[tuple[str, int]],
              upsertions: Iterable[tuple[str, int, int, bytes, bytes]]) -> list[dict]:
        """Deletions (name, mechanism type) and upsertions (name, mechanism type, iterations, salt,
        salted password): one result per user, as Kafka's ScramControlManager.alterCredentials
        (the successful deletions, the successful upsertions, then the errors). Persisted before it
        returns."""
        errors: dict[str, tuple[ErrorCode, str]] = {}
        to_delete: dict[str, tuple[str, str]] = {}
        to_upsert: dict[str, tuple[str, str, int, bytes, bytes]] = {}
        for name, mechanism_type in deletions:
            if name in errors:
                continue
            if to_delete.pop(name, None) is not None:
                errors[name] = (ErrorCode.duplicate_resource, _TWICE)
                continue
            error = _check_name_and_mechanism(name, mechanism_type)
            mechanism = MECHANISMS.get(mechanism_type, "")
            if error is None and self.users.scram_credential(mechanism, name) is None:
                error = (ErrorCode.resource_not_found, "Attempt to delete a user credential that does not exist")
            if error is not None:
                errors[name] = error
            else:
                to_delete[name] = (mechanism, name)
        for name, mechanism_type, iterations, salt, salted_password in upsertions:
            if name in errors:
                continue
            if to_delete.pop(name, None) is not None or to_upsert.pop(name, None) is not None:
                errors[name] = (ErrorCode.duplicate_resource, _TWICE)
                continue
            error = _check_name_and_mechanism(name, mechanism_type)
            if error is None and iterations < MIN_ITERATIONS:
                error = (ErrorCode.unacceptable_credential, "Too few iterations")
            elif error is None and iterations > MAX_ITERATIONS:
                error = (ErrorCode.unacceptable_credential, "Too many iterations")
            if error is not None:
                errors[name] = error
            else:
                to_upsert[name] = (MECHANISMS[mechanism_type], name, iterations, salt, salted_password)
        if to_delete or to_upsert:
            credentials, removed = dict(self._credentials), set(self._removed)
            for mechanism, name in to_delete.values():
                credentials.pop((mechanism, name), None)
                if (mechanism, name) in self._static:
                    removed.add((mechanism, name))
            for mechanism, name, iterations, salt, salted_password in to_upsert.values():
                credentials[(mechanism, name)] = ScramCredential.from_salted_password(
                    mechanism, salted_password, salt, iterations)
                removed.discard((mechanism, name))
            self._persist(credentials, removed)  # first: on a disk error nothing changes
            self._credentials, self._removed = credentials, removed
            for mechanism, name in to_delete.values():
                self.users.remove_scram_credential(mechanism, name)
                log.info("SCRAM credential of user %s for %s deleted", name, mechanism)
            for mechanism, name, iterations, *_ in to_upsert.values():
                self.users.set_scram_credential(mechanism, name, credentials[(mechanism, name)])
                log.info("SCRAM credential of user %s for %s set (%d iterations)", name, mechanism, iterations)
        results: list[dict[str, Any]] = [
            {"user": name, "error_code": ErrorCode.none, "error_message": None} for name in to_delete]
        results += [{"user": name, "error_code": ErrorCode.none, "error_message": None} for name in to_upsert]
        results += [{"user": name, "error_code": code, "error_message": message} for name, (code, message) in errors.items()]
        return results


def _check_name_and_mechanism(name: str, mechanism_type: int) -> tuple[ErrorCode, str] | None:
    if not name:
        return ErrorCode.unacceptable_credential, "Username must not be empty"
    if mechanism_type not in MECHANISMS:
        return ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism"
    return None


def _described(user: str, code: int, message: str | None, infos: list[dict] | None = None) -> dict:
    return {"user": user, "error_code": code, "error_message": message, "credential_infos": infos or ()}
