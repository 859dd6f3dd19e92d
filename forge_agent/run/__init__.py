"""The run layer: the config of a whole run, the driver (two loops and the calls between
services), the services it drives, where they are placed, how they are supervised, and what a
run leaves behind (outputs, checkpoints, recovery).

Light to import: `forge_agent.run.config` loads neither torch nor Monarch; the controller and
services load them when a run starts.
"""
