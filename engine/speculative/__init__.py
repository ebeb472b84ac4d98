"""Speculative decoding: a cheap draft proposes k tokens, the target checks
all of them in one forward pass, and the output is exactly what the target
alone would produce.

- ``accept``: the pure accept rules (greedy, and rejection sampling);
- ``drafts``: where proposals come from (a small model, or n-gram lookup in
  the history) and whether a draft model can propose for a target;
- ``gate``: whether, and how much of, a proposal that costs nothing to make (the
  n-gram lookup) is worth verifying this round; each reply's own state of it;
- ``controller``: per round, which mode (a draft kind, or plain) and how many
  drafts, from this engine's own measurements (it holds the gate's state too);
- ``costs``: what a step, a verified token and a draft step cost here,
  measured once before speculation starts;
- ``step``: ``speculative_step``, a sibling of ``generate.generate_step`` with
  the same yield shape ``(token, from_draft)``.

Exactness and sampling options: p and q are both produced by the *same*
``Sampler.distribution`` (penalties over the same history, then top-k,
top-p, min-p, temperature), the very function plain sampling draws from, so
every option keeps the output distribution exact. What changes is only which
random numbers are drawn: a seeded speculative run is reproducible, but not
token-identical to a seeded plain run. Greedy output is token-identical.

Rollback: after verification the target's KV is truncated to the accepted
length, so rejected draft tokens never stay in the KV (and so never reach the
prefix cache, which only snapshots confirmed tokens).
"""
