"""Models as files: which file or folder a reference names (catalogue), reading a GGUF header
(gguf_header, gguf), a vocabulary and whether a draft can propose for a target (vocab), whether a
transformers folder may be loaded (hf_folder), projectors, digests, and Hub downloads (hub)."""
