"""Client quotas, the pure core: windowed rates, quota managers, the quota callback and the
quota configuration store (KIP-13, KIP-219, KIP-257, KIP-546), and the KIP-936 producer-id quota.

Nothing here imports trio, sleeps or reads a clock: every call takes ``now_ms`` and returns a
throttle time or an error code. The broker shell (``minibroker``) owns time and I/O.
"""
