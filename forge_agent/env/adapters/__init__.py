"""Adapters: other ecosystems' environments as agent envs (and agent envs as theirs).

- `gymnasium`: a text Gymnasium env as an agent env (`gymnasium:<id>`), an agent env as a
  registered `gymnasium.Env`.
- `openenv`: an OpenEnv server as an agent env (an `http(s)://` env id), any agent env served
  as an OpenEnv server.
- `verifiers`: a verifiers environment module (`verifiers:<module>`).
- `reasoning_gym`: a reasoning-gym task (`reasoning_gym:<task>`).
- `textarena`: a TextArena game as a multi-seat env (`textarena:<game>`).

Each loads its ecosystem's package on first use; `forge_agent.env` re-exports their classes
lazily, so `import forge_agent.env` imports none of them.
"""
