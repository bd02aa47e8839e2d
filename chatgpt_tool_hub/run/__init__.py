"""Run-level types shared by the engine, the tools and the apps: the budget and run control
(limits + cancel), usage, steps and results. Plain data; no I/O."""
