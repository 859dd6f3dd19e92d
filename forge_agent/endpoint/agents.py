"""Agent programs as a source of episodes (the env that runs them:
`forge_agent.env.adapters.agent_program.AgentProgramEnv`).

A user writes an agent against the plain `openai` client and a reward for its result:

    async def agent(task: dict, client: openai.AsyncOpenAI) -> str | dict: ...
    def reward(task: dict, result, transcript: list[dict]) -> float | dict[str, float]: ...

One episode (`AgentRolloutRunner.run_episode`, playing through its `_play`):

    endpoint.open_session(task) -> key
    env worker: reset(task + {base_url, key}) -> agent(task, client) runs to the end there
        (every request it makes is sampled by the generator and recorded by the session)
    endpoint.close_session(key) -> token-exact trajectory (ids, mask, logprobs, versions, segments)
        + info["task"], info["result"]; traj.messages is the recorded transcript
    reward actor: reward(task, result, transcript) -> reward and breakdown (the rubric's
        `agent_reward` component, `forge_agent.rewards.program_reward`)

The program runs in an env worker process (never in the controller's loop) under the pool's
`reset_timeout_s` as its wall-time limit: a program past it is killed (`env_timeout`). One that
raises after the policy answered is the policy's failure (`policy_error`, the env's failure
reward, trained on: its parser or checks refused what the policy said); one that raises before
any request, or on an unreachable or failing endpoint, is infra (`env_error`). None crashes the
run.
"""

from __future__ import annotations

import time
from typing import Any

from forge_agent.endpoint.server import EndpointServer
from forge_agent.env.protocol import EnvSource, EpisodeEnv
from forge_agent.generator.config import GenerateFn
from forge_agent.rollout.config import RolloutConfig
from forge_agent.rollout.game import SOLO, Seat
from forge_agent.rollout.renderer import ChatRenderer
from forge_agent.rollout.runner import RolloutRunner
from forge_agent.types import Status


class AgentRolloutRunner(RolloutRunner):
    """A `RolloutRunner` whose episodes are agent programs talking to `server`; groups,
    concurrency limits, traces and statuses are the rollout runner's."""

    def __init__(self, server: EndpointServer, envs: EnvSource, **kwargs: Any) -> None:
        endpoint = server.endpoint
        super().__init__(endpoint.generate, envs, endpoint.renderer, **kwargs)
        self.server = server

    async def _play(
        self,
        env: EpisodeEnv,
        seats: dict[str, Seat],
        task: dict[str, Any],
        seed: int | None,
        sampling_seed: int | None,
    ) -> None:
        """The agent program's run is the episode: it talks to the policy through the
        endpoint, whose session records the one policy seat's trajectory."""
        traj = seats[SOLO].traj
        session = self.server.open_session(traj.task_id, traj.group_id)
        session.temperature = self.config.temperature  # the policy samples as in training
        endpoint = {"base_url": self.server.base_url, "api_key": session.key}
        status, error, result = Status.OK, None, None
        t0 = time.monotonic()
        try:
            messages, _ = await env.reset({**task, "_endpoint": endpoint}, seed)
            result = messages[0]["content"] if messages else None
        except Exception as exc:  # the program raised, timed out or its worker died
            status, error = _status_of(exc), f"agent: {exc}"
            if status is Status.ENV_TIMEOUT and not session.sampling and session.stats["requests"]:
                # past its deadline after the policy answered, with no request being sampled:
                # the program was working on the policy's answers (its tool calls, the code
                # the policy wrote): the policy's budget, as a step's tool calls are
                status = Status.POLICY_TIMEOUT
                error += " (after the policy answered, no request in the generator)"
        traj.timings["agent_s"] = time.monotonic() - t0
        recorded = self.server.close_session(session.key, status)
        if status.is_policy_failure and not recorded.turn_spans:
            status = Status.ENV_ERROR  # it raised before the policy said anything: not its failure
        names = ("token_ids", "loss_mask", "logprobs", "versions", "turn_spans", "tool_call_count")
        for name in names:
            setattr(traj, name, getattr(recorded, name))
        traj.segment_starts = recorded.segment_starts
        traj.messages = recorded.messages
        traj.info.update(recorded.info)
        traj.info["task"] = dict(task)
        traj.info["result"] = result  # the reward actors score task, result and transcript
        traj.status = status
        if status.is_policy_failure:
            traj.fail_by_policy(status, error or "", float(getattr(env, "failure_reward", 0.0)))
        elif error is not None:
            traj.info["error"] = error
        elif not traj.turn_spans:
            traj.status, traj.info["error"] = Status.ENV_ERROR, "the agent made no request"


def _status_of(exc: BaseException) -> Status:
    """The status an env worker failure carries (`env_timeout` past the wall-time limit)."""
    status = getattr(exc, "status", None)
    return status if isinstance(status, Status) else Status.ENV_ERROR


async def start_agent_runners(
    generate: GenerateFn,
    envs: EnvSource,
    renderer: ChatRenderer,
    max_model_len: int,
    configs: list[RolloutConfig],
) -> tuple[EndpointServer, list[AgentRolloutRunner]]:
    """An endpoint on loopback over `generate` and one agent runner per rollout config (the
    controller's hook for `env.id=agent:...`)."""
    server = EndpointServer(generate, renderer, max_model_len)
    await server.start()
    return server, [AgentRolloutRunner(server, envs, config=c) for c in configs]
