"""Who a request comes from, and what it may do: the broker's authentication stores and the one
place authorization sits (Kafka's AuthHelper).

`AuthHelper` holds the SASL users (sasl.users, minibroker.sasl) and the SCRAM credentials created
at runtime (AlterUserScramCredentials, minibroker.scram_credentials), which SaslHandshake,
SaslAuthenticate and the SCRAM admin APIs use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from minibroker.sasl import UserStore
    from minibroker.scram_credentials import ScramCredentialStore

__all__ = ["AuthHelper"]


class AuthHelper:
    def __init__(self, sasl_users: UserStore, scram_credentials: ScramCredentialStore) -> None:
        self.sasl_users = sasl_users
        self.scram_credentials = scram_credentials
