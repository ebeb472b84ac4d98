"""The threads between the window and the engine: the engine thread's load and generation
workers, the local server host, and the settings dialog's planner thread.
"""
