"""Seconds per repository task: the oracle check (grade the oracle patch, grade the untouched
repository) and a full oracle episode (reset in a sandbox, write the fixed files, hidden-test
grading), per shipped task, on bubblewrap and, where a private dockerd can start, on Docker.

    python -m apps.bench.repo_tasks --out bench_results/repo_tasks.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import Any

from apps.bench.util import Timer, machine_info, print_table, write_json
from envs.repo_tasks import RepoTaskEnv, apply_patch, check_task, load_repo_tasks


def _oracle_episode(env: RepoTaskEnv, task: dict[str, Any]) -> float:
    fixed = apply_patch(task["files"], task["oracle_patch"])
    calls = [
        {
            "id": f"c{i}",
            "type": "function",
            "function": {"name": "write_file", "arguments": json.dumps({"path": p, "content": t})},
        }
        for i, (p, t) in enumerate(sorted(fixed.items()))
        if t != task["files"].get(p)
    ]

    async def play() -> float:
        await env.reset(task, 0)
        for call in calls:
            await env.step({"role": "assistant", "content": "", "tool_calls": [call]})
        result = await env.step({"role": "assistant", "content": "Done."})
        return result.rewards["resolved"]

    return asyncio.run(play())


def bench(backend: str, docker_url: str | None) -> list[dict[str, Any]]:
    env = RepoTaskEnv(sandbox_backend=backend, docker_url=docker_url, verify_oracles=False)
    rows = []
    for task in load_repo_tasks():
        sandbox = env.backend_for(task)
        with Timer() as check:
            oracle_s, noop_s = check_task(task, sandbox)
        with Timer() as episode:
            reward = _oracle_episode(env, task)
        assert reward == 1.0, (backend, task["task_id"])
        rows.append(
            {
                "backend": backend,
                "task": task["task_id"].split("/", 1)[1],
                "oracle_grade_s": oracle_s,
                "noop_grade_s": noop_s,
                "check_s": check.seconds,
                "oracle_episode_s": episode.seconds,
            }
        )
    asyncio.run(env.close())
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="bench_results/repo_tasks.json")
    parser.add_argument("--no-docker", action="store_true", help="bubblewrap only")
    args = parser.parse_args(argv)
    rows = bench("bwrap", None)
    skipped = None
    engine = None
    if not args.no_docker:
        try:
            import docker

            from forge_agent.sandbox.docker_local import LocalDockerd, build_python_image

            engine = LocalDockerd().start()
            build_python_image(docker.DockerClient(base_url=engine.base_url))
            rows += bench("docker", engine.base_url)
        except Exception as exc:  # no engine here: say so in the report
            skipped = f"docker: {type(exc).__name__}: {exc}"
        finally:
            if engine is not None:
                engine.stop()
    print_table(
        rows,
        [
            ("backend", "backend", ""),
            ("task", "task", ""),
            ("oracle_grade_s", "oracle grade s", ".2f"),
            ("noop_grade_s", "no-op grade s", ".2f"),
            ("oracle_episode_s", "oracle episode s", ".2f"),
        ],
    )
    if skipped:
        print(f"skipped {skipped}")
    write_json(
        args.out,
        {"benchmark": "repo_tasks", "machine": machine_info(), "rows": rows, "skipped": skipped},
    )


if __name__ == "__main__":
    main()
