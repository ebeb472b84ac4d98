"""The model library: every model on disk and whether it fits this machine (local.py), and browsing
the Hugging Face Hub before downloading (hub_search.py). It stands above sizing, which it asks."""
