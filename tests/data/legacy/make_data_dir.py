"""How tests/data/legacy/data-dir.tar.gz was made: a data directory written by minibroker before the
metadata log (main at 117d3e1, one file per purpose: topics/*.json, producer-ids,
scram-credentials.json, client-quotas.json, broker-configs.json, group-configs.json), for the test
that the first start of a newer version imports it (tests/broker/test_legacy_data_dir.py).

Run with that version's interpreter and code: `/work/main/.venv/bin/python make_data_dir.py OUT.tar.gz`.
"""

import hashlib
import hmac
import sys
import tarfile
import tempfile
from pathlib import Path

from minibroker.protocol.records import encode_batch
from minibroker.storage.offsets_store import OffsetAndMetadata
from minibroker.testing import running_broker

NOW = 1_700_000_000_000


def main(out: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "data"
        with running_broker(data, node_id="1") as running:
            broker = running.broker

            def write() -> None:
                logs = broker.logs
                logs.create_topic("orders", 3, {"retention.ms": "3600000", "cleanup.policy": "delete"}, NOW)
                logs.create_topic("compacted", 1, {"cleanup.policy": "compact"}, NOW)
                for partition in range(3):
                    values = [(f"k{partition}-{i}".encode(), f"v{partition}-{i}".encode()) for i in range(partition + 2)]
                    logs.log("orders", partition).append(encode_batch(values, NOW), NOW)
                logs.log("compacted", 0).append(encode_batch([(b"a", b"1"), (b"a", b"2")], NOW), NOW)
                broker.groups.store.commit("legacy-group", {("orders", 0): OffsetAndMetadata(2, -1, "meta", NOW)}, NOW)
                broker.quotas.alter([([("user", "alice")], [("producer_byte_rate", 1024.0, False)]),
                                     ([("client-id", None)], [("consumer_byte_rate", 2048.0, False)])], False)
                salt = b"legacy-salt-0123"
                salted = hashlib.pbkdf2_hmac("sha512", b"bob-secret", salt, 8192)
                broker.scram_credentials.alter([], [("bob", 2, 8192, salt, salted)])
                dynamic = broker.dynamic_configs
                dynamic.replace(False, {"log.retention.ms": "7200000"})
                dynamic.replace(True, {"log.retention.bytes": "1073741824"})
                broker.group_configs.replace("legacy-group", {"consumer.session.timeout.ms": "50000"})
                for _ in range(3):
                    broker.producer_ids.allocate()
                assert hmac  # (kept for the reader: the salted password is PBKDF2-HMAC-SHA512)

            running.in_broker(write)
        with tarfile.open(out, "w:gz") as tar:
            tar.add(data, arcname="data", filter=lambda info: None if info.name.endswith(".lock") else info)


if __name__ == "__main__":
    main(sys.argv[1])
