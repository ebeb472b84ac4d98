"""The remote engine: a model served elsewhere, used through the engine interface.

Another Hearth, llama-server, vLLM, SGLang, LM Studio or Ollama's ``/v1`` serve
models over OpenAI's chat API; a cluster (vLLM over several nodes) is one such
server. Hearth is their client: ``wire`` speaks HTTP/1.1 with Stop and time-outs
that always work, ``pins`` keeps the certificates first seen (trust on first use),
``client`` speaks the API, and ``engine`` is the second implementation of the
engine interface (engine/interface.py) that the window and ``engine chat`` use.
"""
