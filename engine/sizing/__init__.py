"""Automatic sizing: choose how to load a model so that it fits, and say why.

hardware (the machine), spec (a model's memory-relevant shape), memory (bytes
per pool for one configuration), plan (the search and the plan), report (how a
plan explains itself).

Import from the module that defines a name (``from engine.sizing.plan import plan_for``);
this file imports nothing, so using one part never loads the rest.
"""
