"""KV-cache tiers below the device pool: host memory, local disk, a directory shared by replicas.

Every tier is a ``KVTier`` (``protocol.py``) keyed by the engine's block hashes, which already name
the tenant: the cache salt enters the first block's hash and so every hash after it. Pure Python:
payloads are bytes-like records built by ``record.py``; ``block_io.py`` (torch) moves them between
the device pool and these tiers, and ``connector.py`` is what the KV manager calls.
"""
