"""What a user hands the model besides text: images (checked, then decoded once), their positions
in a token list (media.py), and documents (read into pages, and placed where the prefix cache
keeps them) with retrieval over the ones too long for the context."""
