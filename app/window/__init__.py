"""The main window and what it holds together: replies, navigation, loading, menus, and the
``--self-test`` / ``--screenshot`` / ``--bench-open`` drivers.
"""
