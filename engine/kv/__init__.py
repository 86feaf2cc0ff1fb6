"""KV-cache bookkeeping: block hashing, block pool, prefix cache, tiers."""
