"""Models: which file or folder a reference names (catalogue), reading a GGUF
header (gguf), and downloading from the Hugging Face Hub (hub, downloads only)."""
