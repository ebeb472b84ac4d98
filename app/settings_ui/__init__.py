"""The Settings dialog and its tabs: model, sampling, presets, local server, memory details.
"""
