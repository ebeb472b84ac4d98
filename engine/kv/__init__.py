"""The KV cache: the reuse policy for one sequence (reuse), the slot table of a batch context
(slots), the in-memory prefix cache of snapshots (prefix_cache) and their on-disk store across
restarts (disk_store)."""
