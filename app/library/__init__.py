"""The Models dock: the model library on disk, the Hub browser and the download queue.
"""
