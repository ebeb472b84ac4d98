"""Decoding one request, the same way on every path.

prepare.py   prepare_request(): the prompt, its tools and reasoning layout (both paths call it)
generate.py  generate_step(): the hot loop (forward, sample, yield)
stream.py    stream_tokens(): the stages around it (reply events, thinking budget, stop rules, stats clock)
batch.py     several requests stepped together in one batch context (continuous batching)
sampling.py  make_sampler(); constraint.py: a grammar's mask in front of it; detokenize.py
metrics.py   the reply's one record (GenerationStats); timeline.py: where its time went
"""
