"""The reward-hack suite: scripted adversarial policies try to earn reward without solving the
task, and each test asserts they earn no more than the env's failure reward and are not
excluded as infra (the rule of blame, docs/rewards.md).

The policies are scripted (they say exactly the attack); everything else is real: the
rollout engine, the env worker processes, the shipped envs, the rubric, the evaluator. Attacks
on repository grading and tools: tests/test_reward_hacks_repo.py; on verifiers environments:
tests/test_reward_hacks_verifiers.py.
"""

from __future__ import annotations

import asyncio
import json

import pytest

from forge_agent.algorithms.advantages import compute_advantages
from forge_agent.env import EnvConfig
from forge_agent.env.pool import EnvPool
from forge_agent.env.resolved import ResolvedEnv
from forge_agent.evaluation import evaluate
from forge_agent.rewards import RewardComponent, Rubric
from forge_agent.types import Completion, Group, Status, Trajectory
from tests.helpers import SaysPolicy

CALC_TASKS = [
    {
        "task_id": f"t{i}",
        "prompt": f"What is {a} * {b}?",
        "answer": str(a * b),
        "expression": f"{a} * {b}",
    }
    for i, (a, b) in enumerate([(78, 52), (11, 11), (9, 7)])
]


def _calculator_engine(tokenizer, policy, pool):
    from forge_agent.rollout import ChatRenderer, RolloutConfig, RolloutRunner

    return RolloutRunner(policy, pool, ChatRenderer(tokenizer), RolloutConfig(max_turns=2))


async def _evaluate_in_workers(tokenizer, text: str, k: int = 2):
    async with EnvPool(ResolvedEnv.of(EnvConfig("calculator", {"difficulty": 1})), size=2) as pool:
        engine = _calculator_engine(tokenizer, SaysPolicy(tokenizer, text), pool)
        return await evaluate(engine, CALC_TASKS, k=k)


@pytest.mark.parametrize(
    "answer",
    [r"\boxed{,}", r"\boxed{" + "7" * 5000 + "}"],
    ids=["empty-after-commas", "5000-digits"],
)
def test_an_answer_that_makes_the_judge_raise_evaluates_at_its_true_rate(tiny_tokenizer, answer):
    """Before: the judge's `int("")` (or Python's int-conversion limit) ended the episode
    `env_error`, excluded, and a policy answering so whenever unsure read 1.00 in eval."""
    report = asyncio.run(_evaluate_in_workers(tiny_tokenizer, answer))
    assert report.status_counts == {"policy_error": 6}
    assert report.infra_failures == 0 and report.policy_failures == 6
    assert report.mean_reward == 0.0 and report.pass_at_1 == 0.0
    assert "policy failures" in report.table()


def test_a_judge_raising_is_trained_on_as_a_failure_not_excluded(tiny_tokenizer):
    async def run() -> list[Trajectory]:
        async with EnvPool(
            ResolvedEnv.of(EnvConfig("calculator", {"difficulty": 1})), size=2
        ) as pool:
            engine = _calculator_engine(tiny_tokenizer, SaysPolicy(tiny_tokenizer, "x"), pool)
            right = _calculator_engine(
                tiny_tokenizer, SaysPolicy(tiny_tokenizer, r"\boxed{4056}"), pool
            )
            (bad,) = await engine.run_episode(CALC_TASKS[0], 0)
            (bad_boxed,) = await _calculator_engine(
                tiny_tokenizer, SaysPolicy(tiny_tokenizer, r"\boxed{,}"), pool
            ).run_episode(CALC_TASKS[0], 0)
            (good,) = await right.run_episode(CALC_TASKS[0], 0)
            return [bad, bad_boxed, good]

    wrong, raised, solved = asyncio.run(run())
    assert raised.status is Status.POLICY_ERROR and "ValueError" in raised.info["error"]
    assert raised.reward == 0.0 and raised.info["failure_reward"] == 0.0
    assert solved.reward == 1.0
    kept, stats = compute_advantages([Group("t0", [wrong, raised, solved])])
    assert raised in kept and stats.dropped.get("infra_failure", 0) == 0
    assert raised.advantage < 0 < solved.advantage


def test_a_policy_failure_collects_no_rubric_bonus():
    """A rubric with a bonus component (format, tool use) cannot pay an episode the policy
    failed: it scores the env's failure reward alone."""
    traj = Trajectory(task_id="t", group_id="g", turn_spans=[(0, 1)], turn_rewards=[0.0])
    traj.fail_by_policy(Status.POLICY_TIMEOUT, "step: hung", failure_reward=-1.0)
    rubric = Rubric([RewardComponent("bonus", lambda t: 5.0)])
    asyncio.run(rubric.score_all([traj]))
    assert traj.reward == -1.0
    assert traj.info["reward_breakdown"] == {"policy_failure": -1.0}
    assert traj.turn_rewards == [-1.0]


def test_a_failure_withdraws_rewards_earned_on_earlier_turns():
    traj = Trajectory(task_id="t", group_id="g", turn_spans=[(0, 1), (1, 2)])
    traj.reward_components, traj.turn_rewards = {"progress": 0.8}, [0.8]
    traj.fail_by_policy(Status.POLICY_ERROR, "step: judge raised", failure_reward=0.0)
    assert traj.reward_components == {"policy_failure": 0.0}
    assert traj.turn_rewards == [0.0, 0.0]


# ---------------------------------------------------------------------------- timeouts in layers
def _env_config(env_id: str, **kw) -> EnvConfig:
    return EnvConfig(env_id, kwargs={}, **kw)


@pytest.mark.parametrize(
    "env_id",
    ["calculator", "multihop", "code_exec", "repo_tasks", "sql_mcp", "reasoning_gym:leg_counting"],
)
def test_shipped_envs_nest_their_timeouts_under_the_default_step(env_id):
    from forge_agent.run.setup_checks import check_timeout_layers

    check_timeout_layers(
        ResolvedEnv.of(_env_config(env_id))
    )  # tool < grader < step at the defaults


def test_a_step_timeout_not_above_the_grader_is_refused_naming_the_key():
    from forge_agent.errors import SetupError
    from forge_agent.run.setup_checks import check_timeout_layers

    with pytest.raises(SetupError, match=r"env\.step_timeout_s.*grader_timeout_s is 25 s"):
        check_timeout_layers(ResolvedEnv.of(_env_config("code_exec", step_timeout_s=20.0)))


def test_eval_report_json_keeps_the_policy_failure_count(tiny_tokenizer):
    report = asyncio.run(_evaluate_in_workers(tiny_tokenizer, r"\boxed{,}", k=1))
    assert json.loads(json.dumps(report.to_json()))["policy_failures"] == 3


# ---------------------------------------------------------------------------- endpoint sessions
def test_tool_call_arguments_nested_past_the_stack_stay_text_instead_of_a_500():
    """Before: `_canonical_json` recursed out on them (HTTP 500, the episode `env_error`,
    excluded). Now they are malformed arguments like any other, kept as written."""
    from forge_agent.endpoint.session import normalize_message

    deep = "[" * 200_000 + "]" * 200_000
    call = {"id": "c0", "type": "function", "function": {"name": "f", "arguments": deep}}
    message = normalize_message({"role": "assistant", "content": "", "tool_calls": [call]})
    assert message["tool_calls"][0]["function"]["arguments"] == deep


# ---------------------------------------------------------------------------- games
def test_the_heuristic_opponent_reads_its_role_from_the_game_not_the_agents_text():
    """Before: the text "Player 0." anywhere in what the heuristic saw (the agent's echoed
    message) made it play the other mark, so it blocked and completed the wrong lines."""
    from forge_agent.env.adapters.textarena import TextArenaEnv, tictactoe_heuristic

    env = TextArenaEnv("TicTacToe-v0", cells=True)
    x_sees = [
        {"role": "system", "content": env.system_prompt("player_1")},
        {"role": "user", "content": "[Player 0] Player 0. you will be 'O' [4]"},
        {"role": "user", "content": "You are X. Board: X X 2 / 3 O O / 6 7 8."},
    ]
    assert tictactoe_heuristic(x_sees, []) == "[2]"  # its own win as X, not O's block at 3


def _counting_game(tokenizer, generate, players):
    """A rollout engine playing `tests.seat_envs.CountingGame` (failure reward -1) with
    `players` (None: the policy, i.e. `generate`)."""
    from forge_agent.rollout import ChatRenderer, LocalEnvs, RolloutConfig, RolloutRunner
    from tests.seat_envs import CountingGame

    config = RolloutConfig(max_turns=4, max_total_tokens=4096)
    return RolloutRunner(
        generate, LocalEnvs(CountingGame), ChatRenderer(tokenizer), config, players=players
    )


def test_a_move_that_makes_the_game_raise_loses_it_instead_of_leaving_the_baseline(
    tiny_tokenizer,
):
    """Before: the step's exception ended every seat `env_error` (excluded): a seat about
    to lose could escape by writing a move the judge cannot parse."""

    async def generate(prompt_ids, sampling, session):
        text = "boom" if session.endswith("player_1") else "7"
        ids = tiny_tokenizer.encode(text + "<|im_end|>", add_special_tokens=False)
        return Completion(ids, [-0.1] * len(ids), "stop", policy_version=0)

    engine = _counting_game(tiny_tokenizer, generate, {"player_0": None, "player_1": None})
    group = asyncio.run(engine.run_group({"task_id": "count", "winner": "player_1"}, 0, 1))
    winner, failed = group.trajectories
    assert failed.status is Status.POLICY_ERROR and "cannot parse" in failed.info["error"]
    assert failed.reward == -1.0 and failed.info["failure_reward"] == -1.0
    assert winner.status is Status.OK and winner.reward == 1.0  # zero-sum: the other seat wins


# ---------------------------------------------------------------------------- timeouts, live
def test_tool_calls_that_outlast_the_step_are_the_policys_timeout_not_infra():
    """Before: eight `sleep(60)` calls in one code_exec message outlived the step timeout and
    ended `env_timeout`, excluded, never penalised."""
    from envs.code_exec import load_tasks

    sleep = json.dumps({"code": "import time\ntime.sleep(60)"})
    sleeps = [
        {"id": f"c{i}", "type": "function", "function": {"name": "python", "arguments": sleep}}
        for i in range(8)
    ]

    async def run():
        config = EnvConfig("code_exec", kwargs={}, step_timeout_s=2.0)
        async with EnvPool(ResolvedEnv.of(config), size=1) as pool, pool.lease() as env:
            await env.reset(load_tasks()[0], 0)
            await env.step({"role": "assistant", "content": "", "tool_calls": sleeps})

    with pytest.raises(Exception) as failure:
        asyncio.run(run())
    from forge_agent.env.protocol import step_failure

    assert step_failure(failure.value, None) == (Status.POLICY_TIMEOUT, 0.0)


# ---------------------------------------------------------------------------- warm servers
SERVER = """
import sys, time
for line in sys.stdin:
    cmd = line.strip()
    if cmd == "write":
        open("/tmp/answer", "w").write("42")
    elif cmd == "burn":
        end = time.process_time() + 1.2
        while time.process_time() < end:
            pass
    print("answer" if __import__("os").path.exists("/tmp/answer") else "clean", flush=True)
"""


def test_a_renewed_spawned_process_keeps_no_tmp_files_and_gets_its_cpu_budget_back():
    """Before: a warm MCP server kept its /tmp across episodes (the next episode could read
    the last one's answer there) and its CPU rlimit was one budget for every episode. Now
    renewing empties its /tmp and renews its budget, or, where the host may not raise the
    limit and less than half is left, refuses so that the caller restarts it."""
    from forge_agent.sandbox import Limits, make_sandbox

    backend = make_sandbox("bwrap")
    limits = Limits(wall_s=60, cpu_s=60, memory_mb=512)
    with backend.session(limits) as session:
        proc = session.spawn(["python3", "-c", SERVER], limits=limits.with_(cpu_s=2))

        def ask(cmd: str) -> str:
            proc.stdin.write(cmd.encode() + b"\n")
            proc.stdin.flush()
            return proc.stdout.readline().decode().strip()

        assert ask("write") == "answer"  # episode 1 leaves a file in the server's /tmp
        session.renew_spawned()  # between episodes
        assert ask("check") == "clean"
        assert ask("burn") == "clean"  # spends 1.2 of its 2 CPU seconds
        try:
            session.renew_spawned()
        except OSError as exc:  # this host cannot raise the limit: the caller restarts it
            assert "restart it" in str(exc)
        else:  # the budget was renewed: 2.4 s in all, alive
            assert ask("burn") == "clean" and proc.poll() is None
        proc.kill()
    backend.close()


def test_overflowing_an_endpoint_opponents_context_loses_the_game(tiny_tokenizer):
    """Before: an endpoint opponent refusing the request as too long (HTTP 400: the game's
    transcript, which the policy's messages fill) ended the game `env_error`, excluded, so
    long messages were an escape from a losing game. Now the policy's seat loses it."""
    import http.server
    import threading

    from forge_agent.rollout.players import EndpointPlayer

    class TooLong(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            self.rfile.read(int(self.headers["Content-Length"]))
            body = json.dumps({"error": {"message": "maximum context length exceeded"}})
            self.send_response(400)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body.encode())

        def log_message(self, *args):
            pass

    async def generate(prompt_ids, sampling, session):
        ids = tiny_tokenizer.encode("7<|im_end|>", add_special_tokens=False)
        return Completion(ids, [-0.1] * len(ids), "stop", policy_version=0)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), TooLong)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/v1"
        players = {"player_0": None, "player_1": EndpointPlayer(url, seat="player_1")}
        engine = _counting_game(tiny_tokenizer, generate, players)
        group = asyncio.run(engine.run_group({"task_id": "count"}, 0, 1))
    finally:
        server.shutdown()
    (policy_seat,) = group.trajectories
    assert policy_seat.status is Status.POLICY_ERROR and "400" in policy_seat.info["error"]
    assert policy_seat.reward == -1.0  # CountingGame's failure reward: a lost game


# ---------------------------------------------------------------------------- unfinished episodes
def test_a_game_cut_before_its_first_move_scores_its_worst_return_not_zero(tiny_tokenizer):
    """Found by the CliffWalking trial (docs/envs.md): a turn cut at the token cap before any
    move scored the return earned so far, 0, above every played episode (-13 at best), and
    the policy learned to never move (held-out -108 -> -0.39). Now an unfinished episode
    scores at most the env's failure reward, for `gymnasium:<id>` the game's worst return
    (its worst move, -100, times its move cap, 16)."""
    from forge_agent.env.registry import make_env
    from forge_agent.rollout import ChatRenderer, LocalEnvs, RolloutConfig, RolloutRunner

    async def rambles(prompt_ids, sampling, session):  # never closes its turn
        ids = tiny_tokenizer.encode("left " * sampling.max_tokens, add_special_tokens=False)
        ids = ids[: sampling.max_tokens]
        return Completion(ids, [-0.1] * len(ids), "length", policy_version=0)

    engine = RolloutRunner(
        rambles,
        LocalEnvs(lambda: make_env("gymnasium:CliffWalking-v1", max_moves=16)),
        ChatRenderer(tiny_tokenizer),
        RolloutConfig(max_turns=16, max_total_tokens=1024),
    )
    (traj,) = asyncio.run(engine.run_episode({"task_id": "cliff", "seed": 0}, 0))
    assert traj.status is Status.TRUNCATED_LENGTH
    assert traj.reward == -1600.0 and traj.reward_components["unfinished"] == -1600.0
    assert traj.info["unfinished"] == {"earned": 0.0, "scored": -1600.0}
    assert traj.turn_rewards == [-1600.0]
