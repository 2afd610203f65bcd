"""Finalized features (KIP-584): what ApiVersions advertises beside the API ranges, and UpdateFeatures.

Three features are served: `transaction.version` (KIP-890 part 2), levels 0-2, finalized at 2 as
Kafka 4 finalizes it on a new cluster; `streams.version` (KIP-1071), levels 0-1, finalized at 1
as Kafka 4.4 does: at 1 streams groups are served (StreamsGroupHeartbeat, StreamsGroupDescribe), at 0
they answer UNSUPPORTED_VERSION, which is how Kafka Streams with group.protocol=streams learns the
broker does not serve them; and `share.version` (KIP-932), levels 0-1, finalized at 1: at 1 share
groups are served (ShareGroupHeartbeat, ShareFetch, ShareAcknowledge, the share admin APIs), at 0
they answer UNSUPPORTED_VERSION (Kafka 4.4 finalizes 2, which adds the dead-letter queue of KIP-1191,
not served here). Kafka 4 clients choose their protocol from it: at 2 the Java producer
sends EndTxn v5 (an epoch bump at every end), Produce v12+ without AddPartitionsToTxn and
TxnOffsetCommit v5 without AddOffsetsToTxn; below 2 they keep transactions version 1 (EndTxn v4,
Produce v11 at most for a transactional producer). The broker serves both at any level: what a
request means follows its own version, as in Kafka. The level decides what clients are told, and
from 2 the transaction coordinator writes TransactionLogValue v1.

Where the level comes from: the broker settings `transaction.version` (default 2),
`streams.version` and `share.version` (default 1) are the levels a data directory starts at, as
`kafka-storage format --feature transaction.version=N` sets it on a Kafka node; UpdateFeatures (Kafka's `kafka-features upgrade|downgrade`, Admin.updateFeatures) changes it at
runtime, and that change is kept in `features.json` in the data directory, which wins over the
setting at the next start (Kafka keeps it in its metadata log), with a log line saying so; a
feature the file does not name (one added after it was written) starts at its setting.

ApiVersions carries the supported range (omitted in v0-v3 for a feature whose minimum is 0, as
Kafka omits it: KAFKA-17011), the finalized levels (a feature at level 0 is not finalized: left
out) and the finalized-features epoch, which grows with every change (Java clients read the
finalized levels only from an epoch above the last they saw).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path

from minibroker.protocol.errors import ErrorCode
from minibroker.storage.errors import DamagedFileError
from minibroker.storage.files import write_atomically

__all__ = ["FEATURES_FILE", "SUPPORTED", "FeatureUpdate", "Features"]

log = logging.getLogger(__name__)

FEATURES_FILE = "features.json"
TRANSACTION_VERSION = "transaction.version"
STREAMS_VERSION = "streams.version"
SHARE_VERSION = "share.version"  # KIP-932: 1 serves share groups (Kafka 4.4's 2, the DLQ, is not served)
SUPPORTED: dict[str, tuple[int, int]] = {TRANSACTION_VERSION: (0, 2), STREAMS_VERSION: (0, 1),
                                         SHARE_VERSION: (0, 1)}  # name -> (min, max)

# UpdateFeatures' upgrade types (Kafka's FeatureUpdate.UpgradeType).
UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE = 1, 2, 3


@dataclass(frozen=True)
class FeatureUpdate:
    feature: str
    level: int
    upgrade_type: int = UPGRADE


class Features:
    """The finalized levels and their epoch; `update` is UpdateFeatures."""

    def __init__(self, levels: dict[str, int], epoch: int = 1, path: Path | None = None) -> None:
        self.levels = dict(levels)
        self.epoch = epoch
        self.path = path
        self.on_change: list = []  # callables(levels) run after a change is applied

    @classmethod
    def open(cls, data_dir: Path, transaction_version: int, streams_version: int = 1,
             share_version: int = 1) -> Features:
        """The levels kept in `data_dir` by an earlier UpdateFeatures, else the configured ones."""
        path = data_dir / FEATURES_FILE
        configured = {TRANSACTION_VERSION: transaction_version, STREAMS_VERSION: streams_version,
                      SHARE_VERSION: share_version}
        if not path.exists():
            return cls(configured, 1, path)
        try:
            stored = json.loads(path.read_bytes().decode("utf-8"))
            levels = {str(name): int(level) for name, level in stored["levels"].items()}
            epoch = int(stored["epoch"])
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise DamagedFileError(path, f"unreadable ({exc})",
                                   "restore it, or remove it to start at the configured transaction.version") from exc
        for name, level in levels.items():
            low, high = SUPPORTED.get(name, (0, -1))
            if not low <= level <= high:
                raise DamagedFileError(path, f"holds {name}={level}, which this broker does not support",
                                       "set a supported level in it, or remove it")
        levels.setdefault(SHARE_VERSION, share_version)
        kept = levels.get(TRANSACTION_VERSION, 0)
        if kept != transaction_version:
            log.info("%s=%d as UpdateFeatures left it (%s), not the configured %d", TRANSACTION_VERSION, kept, path,
                     transaction_version)
        for name, level in configured.items():
            levels.setdefault(name, level)
        return cls(levels, epoch, path)

    def level(self, name: str) -> int:
        return self.levels.get(name, 0)

    @property
    def transaction_version(self) -> int:
        return self.level(TRANSACTION_VERSION)

    @property
    def streams_version(self) -> int:
        return self.level(STREAMS_VERSION)

    @property
    def share_version(self) -> int:
        return self.level(SHARE_VERSION)

    def api_versions_fields(self, version: int) -> dict:
        """ApiVersions' supported_features, finalized_features_epoch and finalized_features."""
        return {
            "supported_features": [
                {"name": name, "min_version": low, "max_version": high}
                for name, (low, high) in sorted(SUPPORTED.items()) if version >= 4 or low > 0
            ],
            "finalized_features_epoch": self.epoch,
            "finalized_features": [
                {"name": name, "max_version_level": level, "min_version_level": level}
                for name, level in sorted(self.levels.items()) if level > 0
            ],
        }

    def check(self, update: FeatureUpdate) -> str | None:
        """Why Kafka's controller refuses `update` (INVALID_UPDATE_VERSION), None when it would not."""
        supported = SUPPORTED.get(update.feature)
        if supported is None:
            return f"Invalid update version {update.level} for feature {update.feature}. " \
                   "The controller does not support the given feature."
        level = max(update.level, 0)  # below 1: the feature is removed, level 0
        if not supported[0] <= level <= supported[1]:
            return f"Invalid update version {update.level} for feature {update.feature}. " \
                   f"Local controller supports versions {supported[0]}-{supported[1]}."
        if update.upgrade_type not in (UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE):
            return f"Invalid upgrade type {update.upgrade_type} for feature {update.feature}."
        if level < self.level(update.feature) and update.upgrade_type == UPGRADE:
            return f"Invalid update version {update.level} for feature {update.feature}. " \
                   "Can't downgrade the version of this feature without setting the upgrade type to either " \
                   "safe or unsafe downgrade."
        return None

    def update(self, updates: list[FeatureUpdate], validate_only: bool = False) -> tuple[ErrorCode, str | None]:
        """UpdateFeatures, all or nothing, as Kafka's controller applies it: the first refusal is
        the answer, nothing changed; else every level is set (kept in the data directory before it
        counts), and the epoch grows. An OSError (the data directory) propagates, nothing changed."""
        names = [u.feature for u in updates]
        if len(set(names)) != len(names):
            return ErrorCode.invalid_request, "The request contains multiple updates for the same feature."
        for update in updates:
            reason = self.check(update)
            if reason is not None:  # QuorumController.updateFeatures: atomic, the first refusal refuses all
                return ErrorCode.invalid_update_version, \
                    f"The update failed for all features since the following feature had an error: {reason}"
        if validate_only or not updates:
            return ErrorCode.none, None
        levels = dict(self.levels)
        for update in updates:
            levels[update.feature] = max(update.level, 0)
        epoch = self.epoch + 1
        if self.path is not None:
            write_atomically(self.path, json.dumps({"levels": levels, "epoch": epoch}, indent=1).encode())
        self.levels, self.epoch = levels, epoch
        for update in updates:
            log.info("feature %s finalized at level %d (UpdateFeatures)", update.feature, max(update.level, 0))
        for callback in self.on_change:
            callback(self.levels)
        return ErrorCode.none, None
