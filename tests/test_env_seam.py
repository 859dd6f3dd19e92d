"""The env seam: how an env declares its tasks, demonstrations and corpus, how envs are found
(register, "module:Class", entry points of a user's package, OpenEnv URLs), and the errors for
bad input, each naming the env id, the source and what is missing."""

from __future__ import annotations

import asyncio
import json
import textwrap
from pathlib import Path

import pytest

import forge_agent.env
from forge_agent.env import (
    Dataset,
    EnvConfig,
    EnvSetupError,
    env_spec,
    register,
    registered_env_ids,
)
from forge_agent.env.resolved import ResolvedEnv
from forge_agent.env.tasks import TaskStream, load_tasks
from tests.user_envs import make_user_package, remove_user_package

USER_ENVS = '''
from forge_agent.env import Dataset, ToolEnv, holdout


def untyped_price(item):
    return "3"


class UntypedToolEnv(ToolEnv):
    tools = (untyped_price,)

    def tasks(self, split, n, seed):
        return [{"task_id": str(i), "prompt": "price?"} for i in range(n)]

    def demonstrations(self, n, seed, demo_fraction):
        return []

    def judge(self, answer):
        return 0.0


def echo(text: str) -> str:
    """Echo text back.

    Args:
        text: What to echo.
    """
    return text


class ListEnv(ToolEnv):
    """Tasks from a plain list: no task code at all."""

    tools = (echo,)
    required_fields = ("prompt", "answer")
    dataset = [
        {"task_id": f"w{i}", "prompt": f"Say {w}.", "answer": w}
        for i, w in enumerate(["apple", "pear", "plum", "fig", "kiwi", "lime", "date", "yuzu",
                               "sloe", "quince", "grape", "melon", "peach", "lemon", "guava"])
    ]

    def judge(self, answer):
        return {"correct": float(answer.strip() == self.task["answer"])}

    def demonstrations(self, n, seed, demo_fraction):
        return [
            [{"role": "user", "content": t["prompt"]},
             {"role": "assistant", "content": t["answer"]}]
            for t in (self.dataset * n)[:n]
        ]


class CountEnv(ToolEnv):
    """A generator: tasks(split, n, seed), split by content."""

    tools = (echo,)

    def tasks(self, split, n, seed):
        made = [{"task_id": f"c{seed}-{i}", "prompt": f"Count to {seed * n + i}."}
                for i in range(n)]
        return holdout(made, split, key=lambda t: t["prompt"])

    def judge(self, answer):
        return {"correct": 0.0}


class GuessEnv(ToolEnv):
    """A generator without tools: the answer is guessed."""

    def tasks(self, split, n, seed):
        made = [{"task_id": f"g{seed}-{i}", "prompt": f"Guess {seed * n + i}."}
                for i in range(n)]
        return holdout(made, split, key=lambda t: t["prompt"])

    def judge(self, answer):
        return {"correct": 0.0}


class FileEnv(ToolEnv):
    """Tasks from a local file given at construction."""

    required_fields = ("prompt", "answer")

    def __init__(self, path=None):
        self.dataset = Dataset(path) if path else None

    def judge(self, answer):
        return {"correct": 0.0}


class NoTasksEnv(ToolEnv):
    def judge(self, answer):
        return {"correct": 0.0}


class BrokenTasksEnv(ToolEnv):
    """Its generator forgets the prompt the env reads."""

    def tasks(self, split, n, seed):
        return [{"task_id": f"b{i}", "question": "?"} for i in range(n)]

    def judge(self, answer):
        return {"correct": 0.0}
'''


@pytest.fixture(scope="module")
def user_package(tmp_path_factory):
    root = make_user_package(
        tmp_path_factory.mktemp("user_pkg"),
        {"seam_user_envs/__init__.py": USER_ENVS},
        entry_points={
            "seam_list": "seam_user_envs:ListEnv",
            "seam_broken_import": "seam_user_envs_missing.module:Env",
        },
        dist="seam-user-envs",
    )
    yield root
    remove_user_package(root)


# ---------------------------------------------------------------------------- discovery
def test_entry_point_of_a_user_package_is_an_env_id(user_package):
    assert "seam_list" in registered_env_ids()
    assert env_spec("seam_list").entry_point == "seam_user_envs:ListEnv"
    assert "seam-user-envs" in env_spec("seam_list").description


def test_shipped_envs_are_registered_through_entry_points_only():
    from importlib.metadata import entry_points

    from forge_agent.env.registry import _REGISTRY

    declared = {ep.name: ep.value for ep in entry_points(group="forge_agent.envs")}
    for env_id in ("calculator", "code_exec", "frozen_lake", "blackjack", "sql_mcp"):
        assert declared[env_id].startswith("envs."), env_id
        assert env_id not in _REGISTRY  # nothing in forge_agent registers them


def test_module_class_and_register_name_the_same_env(user_package):
    register("seam_registered", "seam_user_envs:CountEnv", overwrite=True)
    by_id = load_tasks(ResolvedEnv.of("seam_registered"), "train", 10, seed=0)
    by_path = load_tasks(ResolvedEnv.of("seam_user_envs:CountEnv"), "train", 10, seed=0)
    assert by_id == by_path and len(by_id) == 10


def test_an_openenv_url_is_an_env_id():
    spec = env_spec("http://127.0.0.1:8123")
    assert spec.entry_point == "forge_agent.env.adapters.openenv:OpenEnvAgentEnv"
    assert spec.kwargs == {"base_url": "http://127.0.0.1:8123"}


# ---------------------------------------------------------------------------- task sources
def test_a_task_list_needs_no_task_code_and_splits_by_task_id(user_package):
    train = load_tasks(ResolvedEnv.of("seam_list"), "train", 100, seed=0)
    held_out = load_tasks(ResolvedEnv.of("seam_list"), "eval", 100, seed=0)
    assert train and held_out
    assert {t["task_id"] for t in train} | {t["task_id"] for t in held_out} == {
        f"w{i}" for i in range(15)
    }
    assert not {t["task_id"] for t in train} & {t["task_id"] for t in held_out}


def test_a_generator_stream_never_yields_an_eval_task(user_package):
    held_out = {
        t["prompt"]
        for t in load_tasks(ResolvedEnv.of("seam_user_envs:CountEnv"), "eval", 50, seed=0)
    }
    stream = TaskStream(ResolvedEnv.of("seam_user_envs:CountEnv"))
    train = {next(stream)[0]["prompt"] for _ in range(300)}
    assert len(held_out) == 50 and len(train) == 300 and not held_out & train


@pytest.mark.parametrize("suffix", ["jsonl", "json", "csv", "parquet"])
def test_local_files_load_with_a_field_mapping(user_package, tmp_path, suffix):
    import datasets

    rows = [{"id": f"r{i}", "question": f"Q{i}", "solution": f"A{i}"} for i in range(20)]
    path = tmp_path / f"rows.{suffix}"
    if suffix == "jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    else:
        getattr(datasets.Dataset.from_list(rows), f"to_{suffix}")(str(path))
    fields = {"task_id": "id", "prompt": "Please answer: {question}", "answer": "solution"}
    tasks = load_tasks(
        ResolvedEnv.of("seam_user_envs:FileEnv", dataset=str(path), fields=fields),
        "train",
        100,
        seed=0,
    )
    tasks += load_tasks(
        ResolvedEnv.of("seam_user_envs:FileEnv", dataset=str(path), fields=fields),
        "eval",
        100,
        seed=0,
    )
    assert sorted(t["task_id"] for t in tasks) == sorted(r["id"] for r in rows)
    task = next(t for t in tasks if t["task_id"] == "r3")
    assert task["prompt"] == "Please answer: Q3" and task["answer"] == "A3"


def test_the_config_dataset_overrides_the_envs_own(user_package, tmp_path):
    path = tmp_path / "other.jsonl"
    rows = [{"task_id": f"x{i}", "prompt": "p", "answer": "a"} for i in range(10)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    tasks = load_tasks(ResolvedEnv.of("seam_list", dataset=str(path)), "train", 10, 0)
    tasks += load_tasks(ResolvedEnv.of("seam_list", dataset=str(path)), "eval", 10, 0)
    assert sorted(t["task_id"] for t in tasks) == [f"x{i}" for i in range(10)]


def test_a_dataset_object_keeps_its_split_key():
    data = Dataset([{"n": i} for i in range(50)], key=lambda t: f"n={t['n']}")
    from forge_agent.env.sources import in_eval_split, load_dataset_splits

    splits = load_dataset_splits(data, "inline")
    assert {t["n"] for t in splits["eval"]} == {i for i in range(50) if in_eval_split(f"n={i}")}


# ---------------------------------------------------------------------------- bad input
def test_env_without_tasks_names_the_env_and_what_to_add(user_package):
    with pytest.raises(EnvSetupError) as err:
        load_tasks(ResolvedEnv.of("seam_user_envs:NoTasksEnv"), "train", 4, seed=0)
    text = str(err.value)
    assert "'seam_user_envs:NoTasksEnv'" in text and "NoTasksEnv" in text
    assert "no tasks" in text and "tasks(split, n, seed)" in text and "env.dataset" in text


def test_missing_dataset_file_names_env_and_path(user_package, tmp_path):
    missing = str(tmp_path / "nope.jsonl")
    with pytest.raises(EnvSetupError) as err:
        TaskStream(ResolvedEnv.of(EnvConfig("seam_user_envs:FileEnv", {"path": missing})))
    assert "'seam_user_envs:FileEnv'" in str(err.value)
    assert missing in str(err.value) and "does not exist" in str(err.value)


def test_task_missing_a_field_names_env_source_task_and_field(user_package, tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps({"task_id": "t1", "prompt": "p"}) + "\n")
    with pytest.raises(EnvSetupError) as err:
        load_tasks(ResolvedEnv.of("seam_user_envs:FileEnv", dataset=str(path)), "train", 4, seed=0)
    text = str(err.value)
    assert "'seam_user_envs:FileEnv'" in text and str(path) in text
    assert "'t1'" in text and "answer" in text


def test_generated_task_missing_a_field_names_env_and_field(user_package):
    with pytest.raises(EnvSetupError) as err:
        TaskStream(ResolvedEnv.of("seam_user_envs:BrokenTasksEnv"))
    text = str(err.value)
    assert "BrokenTasksEnv" in text and "tasks()" in text and "prompt" in text


def test_field_mapping_of_an_absent_column_lists_the_columns(user_package, tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps({"task_id": "t1", "q": "p", "a": "x"}) + "\n")
    with pytest.raises(EnvSetupError) as err:
        load_tasks(
            ResolvedEnv.of("seam_user_envs:FileEnv", dataset=str(path), fields={"prompt": "text"}),
            "train",
            4,
            0,
        )
    assert "'text'" in str(err.value) and "columns: a, q, task_id" in str(err.value)


def test_entry_point_that_does_not_import_names_env_and_entry_point(user_package):
    with pytest.raises(EnvSetupError) as err:
        load_tasks(ResolvedEnv.of("seam_broken_import"), "train", 4, seed=0)
    text = str(err.value)
    assert "'seam_broken_import'" in text
    assert "seam_user_envs_missing.module:Env" in text and "does not import" in text


def test_bad_env_fails_before_any_actor_starts(user_package, tmp_path):
    from forge_agent.run.config import load_config
    from forge_agent.run.controller import Controller

    cfg = load_config(
        None,
        [
            "env.id=seam_user_envs:NoTasksEnv",
            "env.kwargs={}",
            f"output_dir={tmp_path / 'run'}",
            "metrics.console=false",
        ],
    )
    controller = Controller(cfg)
    with pytest.raises(EnvSetupError, match="NoTasksEnv"):
        asyncio.run(controller.setup())
    assert controller.services is None  # no actor, env worker or mesh was started


# ---------------------------------------------------------------------------- warm start, corpus
def test_demonstrations_come_from_the_env(user_package):
    from forge_agent.warm_start import demonstration_source, demonstrations

    convos, tools = demonstrations(ResolvedEnv.of("seam_list"), 4, 1.0, seed=0)
    assert [c[-1]["content"] for c in convos] == ["apple", "pear", "plum", "fig"]
    assert [t["function"]["name"] for t in tools] == ["echo"]
    assert demonstration_source(ResolvedEnv.of("seam_list")) == "demonstrations"
    assert demonstration_source(ResolvedEnv.of("seam_user_envs:CountEnv")) == "tool schemas"
    assert demonstration_source(ResolvedEnv.of("seam_user_envs:GuessEnv")) is None


def test_a_tool_without_a_type_hint_is_blamed_on_the_tool_not_on_demonstrations(user_package):
    # It read "its demonstrations() (or a reset ...) raised TypeError" before: the wrong part.
    from forge_agent.warm_start import demonstration_source

    with pytest.raises(EnvSetupError) as raised:
        demonstration_source(ResolvedEnv.of("seam_user_envs:UntypedToolEnv"))
    message = str(raised.value)
    assert "(source: its tools)" in message and "demonstrations()" not in message, message
    assert "tool function untyped_price" in message and "parameter 'item'" in message, message
    assert "seam_user_envs/__init__.py:" in message


def test_an_env_without_demonstrations_gets_calls_sampled_from_its_tool_schemas(user_package):
    from forge_agent.warm_start import demonstrations

    convos, tools = demonstrations(ResolvedEnv.of("seam_user_envs:CountEnv"), 6, 0.5, seed=0)
    assert len(convos) == 6 and [t["function"]["name"] for t in tools] == ["echo"]
    for convo in convos:
        assert convo[0]["content"].startswith("Count to")  # the env's own reset messages
        calls = [m for m in convo if m.get("tool_calls")]
        replies = [m for m in convo if m["role"] == "tool"]
        assert 1 <= len(calls) <= 3 and len(replies) == len(calls)
        for call, reply in zip(calls, replies, strict=True):
            (tc,) = call["tool_calls"]
            args = json.loads(tc["function"]["arguments"])
            assert tc["function"]["name"] == "echo" and reply["content"] == args["text"]
        assert convo[-1]["role"] == "assistant" and not convo[-1].get("tool_calls")


def test_env_without_demonstrations_skips_the_warm_start_with_one_line(
    user_package, caplog, tmp_path
):
    from forge_agent.run.config import load_config
    from forge_agent.run.controller import start_policy

    cfg = load_config(
        None, ["env.id=seam_user_envs:GuessEnv", "env.kwargs={}", f"model.name={tmp_path}"]
    )
    with caplog.at_level("WARNING", logger="forge_agent.warm_start"):
        assert start_policy(cfg, ResolvedEnv.of(cfg.env)) == tmp_path
    (line,) = [r.getMessage() for r in caplog.records]
    assert "warm start skipped" in line and "seam_user_envs:GuessEnv" in line


def test_an_agent_program_warm_starts_and_caches_as_its_tasks_from_env(user_package, tmp_path):
    from forge_agent.warm_start import WarmStartConfig, demonstrations, warm_start_dir

    program = {"reward": "json:dumps", "tasks_from": "seam_list"}
    convos, tools = demonstrations(
        ResolvedEnv.of("agent:json:dumps", kwargs=program), 4, 1.0, seed=0
    )
    assert (convos, tools) == demonstrations(ResolvedEnv.of("seam_list"), 4, 1.0, seed=0)
    cfg = WarmStartConfig()
    cached = warm_start_dir(
        "/models/tiny", [ResolvedEnv.of("agent:json:dumps", kwargs=program)], cfg, tmp_path
    )
    assert cached == warm_start_dir("/models/tiny", [ResolvedEnv.of("seam_list")], cfg, tmp_path)
    no_demos = {"reward": "json:dumps", "tasks_from": "seam_user_envs:CountEnv"}
    own = warm_start_dir(
        "/models/tiny", [ResolvedEnv.of("agent:json:dumps", kwargs=no_demos)], cfg, tmp_path
    )
    assert own.name.startswith("warm-tiny-agent:json:dumps-")


def test_corpus_without_a_hook_is_the_rendered_reset_messages(user_package):
    from forge_agent.models.tiny import env_corpus

    texts = env_corpus(["seam_list"])
    ours = texts[-len(load_tasks(ResolvedEnv.of("seam_list"), "train", 100, seed=0)) :]
    assert all('"name": "echo"' in t and "<|im_start|>user\nSay " in t for t in ours)


def test_default_tokenizer_corpus_comes_from_the_shipped_envs_hooks():
    """The default tiny model's corpus is what the shipped envs' `corpus()` give, in order."""
    from forge_agent.models.config import DEFAULT_CORPUS_ENVS
    from forge_agent.models.tiny import env_corpus

    texts = env_corpus()
    assert DEFAULT_CORPUS_ENVS == ("calculator", "code_exec", "frozen_lake")
    assert sum("calculator" in t for t in texts) >= 600  # 3 difficulties x 200 problems
    assert sum(t.count("\n") == 3 and "A" in t for t in texts) == 50  # frozen lake boards


def test_a_user_env_trains_the_tokenizer_only_when_model_tiny_corpus_envs_lists_it(user_package):
    """docs/envs.md said a user env's `corpus()` trains the tiny tokenizer; the tokenizer reads
    only `model.tiny.corpus_envs`, which the page now names."""
    from forge_agent.models.tiny import env_corpus
    from forge_agent.run.config import load_config

    listed = load_config(None, ["model.tiny.corpus_envs=[calculator, seam_list]"])
    assert listed.model.tiny_config().corpus_envs == ["calculator", "seam_list"]
    ours = [t for t in env_corpus(listed.model.tiny_config().corpus_envs) if '"echo"' in t]
    assert ours  # the user env's text is in the tokenizer's corpus
    default = load_config(None, []).model.tiny_config().corpus_envs
    assert "seam_list" not in default and not any('"echo"' in t for t in env_corpus(default))
    page = (Path(__file__).resolve().parents[1] / "docs" / "envs.md").read_text()
    assert "when `model.tiny.corpus_envs` lists the env | `corpus()`" in page


def test_code_exec_task_shapes_normalize():
    from envs.code_exec.env import normalize_task

    task = normalize_task(
        {
            "task_id": "mbpp-1",
            "prompt": "p",
            "reference": "def helper(x):\n    return x\n\ndef first_char(s):\n    return s[0]\n",
            "test_code": ["assert first_char('ab') == 'a'", "assert first_char('z') == 'z'"],
        }
    )
    assert task["entry_point"] == "first_char"
    assert task["test_code"] == textwrap.dedent(
        """\
        assert first_char('ab') == 'a'
        assert first_char('z') == 'z'"""
    )


def test_kwargs_meant_for_another_env_name_the_env_and_the_kwargs(user_package):
    with pytest.raises(EnvSetupError) as err:
        TaskStream(ResolvedEnv.of(EnvConfig("seam_user_envs:CountEnv", {"difficulty": 1})))
    text = str(err.value)
    assert "'seam_user_envs:CountEnv'" in text and "env.kwargs={'difficulty': 1}" in text


class _TaskToolsEnv(forge_agent.env.ToolEnv):
    """Tools built from the episode's task, as a user writes them: `get_tools` reads
    `self.task`, which is only set by a reset."""

    system_prompt = "Look the item up."

    def get_tools(self):
        prices = self.task["prices"]

        def price(item: str) -> str:
            """An item's price.

            Args:
                item: The item's name.
            """
            return str(prices.get(item, "unknown"))

        return [price]

    def default_task(self, seed: int) -> dict:
        return {"task_id": f"t{seed}", "prompt": "Price of a mug?", "prices": {"mug": 3}}

    def demonstrations(self, n: int, seed: int, demo_fraction: float) -> list[list[dict]]:
        return [
            [
                {"role": "system", "content": self.system_prompt},
                {"role": "user", "content": "Price of a mug?"},
                {"role": "assistant", "content": "3"},
            ]
        ] * n


def test_demonstrations_of_an_env_whose_tools_need_its_task_get_them_from_a_reset():
    from forge_agent.env.demonstrations import env_demonstrations

    convos = env_demonstrations(_TaskToolsEnv(), 3, 0, 1.0)
    assert len(convos) == 3
    for _, tools in convos:
        assert [t["function"]["name"] for t in tools] == ["price"]
