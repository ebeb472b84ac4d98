"""Serving several callers: the scheduler (the window first, a queue, batching where the engine can),
what a caller hands it and gets back (requests.py), what a request's model names (targets.py), the
pool of library models loaded on request (pool.py, library_pool.py), and the cyclic GC kept out of the
replies once a model is loaded (quiet_gc.py)."""
