"""SASL/SCRAM users created and removed while the broker runs (KIP-554: DescribeUserScramCredentials
and AlterUserScramCredentials), kept in the cluster's metadata log (UserScramCredentialRecord and
RemoveUserScramCredentialRecord, minibroker.storage.metadata_image).

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
deleted here stays deleted after a restart (the metadata log keeps its removal).

Every broker of a cluster applies every change, whichever broker took the request: the change is
committed to the metadata log first, and each broker's store follows what is published.

Data directories written before the metadata log kept the credentials in `scram-credentials.json`
({"version": 1, "credentials": {user: {mechanism: {"salt", "stored_key", "server_key" (base64),
"iterations"}}}, "removed": {user: [mechanism]}}); `read_legacy_file` reads it once, into the
metadata log (minibroker.metadata_migration). A file that cannot be read stops the broker with a
message naming it.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Sequence

from minibroker.sasl import ScramCredential, UserStore
from minibroker.protocol.errors import ErrorCode
from minibroker.storage.metadata_image import (
    MetadataRecord,
    RemoveUserScramCredentialRecord,
    UserScramCredentialRecord,
)

if TYPE_CHECKING:
    from minibroker.metadata import BrokerMetadata

log = logging.getLogger(__name__)

SCRAM_CREDENTIALS_FILE = "scram-credentials.json"
MECHANISMS = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}  # Kafka's ScramMechanism types
MECHANISM_TYPES = {name: type_ for type_, name in MECHANISMS.items()}
MIN_ITERATIONS = 4096  # Kafka's ScramMechanism.minIterations, both hashes
MAX_ITERATIONS = 16384  # ScramControlManager.MAX_ITERATIONS


_TWICE = "A user credential cannot be altered twice in the same request"


def _record(user: str, mechanism: str, credential: ScramCredential) -> UserScramCredentialRecord:
    return UserScramCredentialRecord(user, MECHANISM_TYPES[mechanism], credential.salt, credential.stored_key,
                                     credential.server_key, credential.iterations)


class ScramCredentialStore:
    """The metadata's SCRAM credentials, applied to a broker's UserStore."""

    def __init__(self, users: UserStore, metadata: BrokerMetadata) -> None:
        self.users = users
        self.metadata = metadata

    @classmethod
    def open(cls, users: UserStore, metadata: BrokerMetadata) -> ScramCredentialStore:
        store = cls(users, metadata)
        credentials = metadata.image.scram.credentials
        for (user, mechanism_type), data in credentials.items():
            store._apply(user, mechanism_type, data)
        if credentials:
            log.info("%d SCRAM credential(s) from the metadata log", sum(1 for c in credentials.values() if c))
        metadata.subscribe(store._on_metadata)
        return store

    def _apply(self, user: str, mechanism_type: int, data: Any) -> None:
        mechanism = MECHANISMS.get(mechanism_type)
        if mechanism is None:
            return
        if data is None:
            self.users.remove_scram_credential(mechanism, user)
        else:
            self.users.set_scram_credential(mechanism, user, ScramCredential(
                data.salt, data.iterations, data.stored_key, data.server_key))

    def _on_metadata(self, records: Sequence[MetadataRecord]) -> None:
        for record in records:
            if isinstance(record, (UserScramCredentialRecord, RemoveUserScramCredentialRecord)):
                self._apply(record.name, record.mechanism, self.metadata.image.scram.credentials.get(
                    (record.name, record.mechanism)))

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
            records: list[MetadataRecord] = [
                RemoveUserScramCredentialRecord(name, MECHANISM_TYPES[mechanism]) for mechanism, name in to_delete.values()]
            for mechanism, name, iterations, salt, salted_password in to_upsert.values():
                records.append(_record(name, mechanism, ScramCredential.from_salted_password(
                    mechanism, salted_password, salt, iterations)))
            self.metadata.commit(records)  # first: on a disk error nothing changes; applied as published
            for mechanism, name in to_delete.values():
                log.info("SCRAM credential of user %s for %s deleted", name, mechanism)
            for mechanism, name, iterations, *_ in to_upsert.values():
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


def read_legacy_file(data_dir: Path) -> list[MetadataRecord] | None:
    """The records of an earlier version's `scram-credentials.json` (None: no file); ValueError
    naming the file when it cannot be read."""
    path = Path(data_dir) / SCRAM_CREDENTIALS_FILE
    if not path.exists():
        return None
    try:
        state = json.loads(path.read_bytes())
        if state.get("version") != 1:
            raise ValueError("not a version 1 SCRAM credentials file")
        records: list[MetadataRecord] = []
        for user, mechanisms in state["credentials"].items():
            for mechanism, fields in mechanisms.items():
                if mechanism not in MECHANISM_TYPES or not isinstance(user, str):
                    raise ValueError(f"bad entry {user!r}/{mechanism!r}")
                records.append(UserScramCredentialRecord(
                    user, MECHANISM_TYPES[mechanism],
                    base64.b64decode(fields["salt"], validate=True),
                    base64.b64decode(fields["stored_key"], validate=True),
                    base64.b64decode(fields["server_key"], validate=True),
                    int(fields["iterations"])))
        stored = {(r.name, r.mechanism) for r in records if isinstance(r, UserScramCredentialRecord)}
        for user, mechanisms in state.get("removed", {}).items():
            for mechanism in mechanisms:
                if mechanism not in MECHANISM_TYPES:
                    raise ValueError(f"bad removed entry {user!r}/{mechanism!r}")
                if (user, MECHANISM_TYPES[mechanism]) not in stored:
                    records.append(RemoveUserScramCredentialRecord(user, MECHANISM_TYPES[mechanism]))
    except (OSError, ValueError, KeyError, TypeError, AttributeError, binascii.Error) as exc:
        raise ValueError(
            f"{path}: unreadable SCRAM credentials ({exc!r}); restore the file, or remove it "
            "to keep only the users of sasl.users") from None
    return records
