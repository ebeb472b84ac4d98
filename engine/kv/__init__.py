"""The KV cache's reuse policy (reuse), the in-memory prefix cache of snapshots
(prefix_cache) and their on-disk store across restarts (disk_store)."""
