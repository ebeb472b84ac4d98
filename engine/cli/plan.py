"""``python -m engine plan``: the plan for a model on this (or a simulated) machine.

The machine is the one the window plans for (engine.sizing.load_machine.machine): for a
GGUF, the GPU devices llama.cpp's build registered with ggml (a Vulkan-only GPU
included), not only what NVML sees.
"""
from __future__ import annotations

import json
from dataclasses import replace

from ..config import default_exactness
from ..errors import HearthError
from ..sizing.hardware import simulated
from ..sizing.report import plan_dict, render_table


def cli_plan(args) -> int:
    """``python -m engine plan``: print the plan (or --json). Exit 0 when it
    fits (with or without offload), 1 when it does not."""
    from ..sizing.load_machine import machine
    from ..sizing.load_plan import choices
    from ..sizing.load_spec import LoadSpec, or_auto
    from ..sizing.plan import plan_for

    try:
        hw = simulated(args.gpu, args.ram) if (args.gpu or args.ram) else None
    except ValueError as e:
        raise HearthError(str(e)) from None
    if args.parallel < 0:
        raise HearthError(f"--parallel must be 0 or more, not {args.parallel}")
    spec = LoadSpec(model=args.model or "bundled", context=or_auto(args.ctx), draft=or_auto(args.draft),
                    server_parallel=args.parallel, exactness=args.exactness or default_exactness())
    fmt = spec.plan_format or "gguf"
    # --quant picks a catalogue model's GGUF quantization too, which a window's spec never does.
    plan = plan_for(args.model, hw or machine(fmt), replace(choices(spec, fmt), quant=or_auto(args.quant)))
    if args.json:
        print(json.dumps(plan_dict(plan), indent=2))
    else:
        print(render_table(plan))
    return 0 if plan.fits else 1
