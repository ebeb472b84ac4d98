"""Decoding one request, the same way on every path.

prepare.py          prepare_request(): the prompt, its tools and reasoning layout (both paths call it)
generate.py         generate_step(): the hot loop (forward, sample, yield)
stream.py           stream_tokens(): the stages around it and its stats clock; each other stage has a file:
reply_events.py     a token's text as reasoning, answer and tool-call events
thinking_budget.py  the most reasoning tokens a reply may spend, then the block closed
stop_rules.py       when a reply ends; room.py: a reply that fills the context goes on
resample.py         a failed tool call drawn again; call_closing.py: a forced call closed within its budget
sampling.py         make_sampler(); constraint.py: a grammar's mask in front of it; detokenize.py
metrics.py          the reply's one record (GenerationStats); timeline.py: where its time went
"""
