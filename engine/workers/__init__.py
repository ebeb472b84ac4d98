"""Other machines' devices for one model: llama.cpp RPC workers, how Hearth reaches them, and the child
process a model that uses them runs in.

``machines`` reads what the user adds (``host:port``, or ``user@host`` reached over SSH) and opens a
link to it (``ssh`` starts the worker there and forwards its port); ``relay`` is the allow-list a worker
listening beyond loopback answers through; ``child`` runs a model that uses workers in a private
``engine serve`` the window talks to through the remote engine, so a lost worker, which aborts the
process llama.cpp's RPC client runs in, never takes the window with it.
"""
