"""Qt-free: the store, settings, export, branches, search, and the window's plain-data helpers.

Nothing here imports Qt or another app package (tests/test_layout.py checks it).
"""
