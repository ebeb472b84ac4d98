"""``python -m engine plan``: the plan for a model on this (or a simulated) machine."""
from __future__ import annotations

import json

from ..errors import HearthError
from .hardware import simulated
from .plan import Choices, plan_for
from .report import plan_dict, render_table


def cli_plan(args) -> int:
    """``python -m engine plan``: print the plan (or --json). Exit 0 when it
    fits (with or without offload), 1 when it does not."""
    try:
        hw = simulated(args.gpu, args.ram) if (args.gpu or args.ram) else None
    except ValueError as e:
        raise HearthError(str(e)) from None
    plan = plan_for(args.model, hw, Choices(quant=args.quant, n_ctx=args.ctx, draft=args.draft))
    if args.json:
        print(json.dumps(plan_dict(plan), indent=2))
    else:
        print(render_table(plan))
    return 0 if plan.fits else 1
