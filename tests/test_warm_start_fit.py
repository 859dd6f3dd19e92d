"""A warm start whose demonstrated turns do not fit the rollout's token limits says so at setup:
sql_mcp's `read_query` calls (SQL spelled nearly character by character by the tiny
tokenizer) take more than the default 48 tokens a turn, which cut every call off
(docs/multi_step.md)."""

from __future__ import annotations

import json


def test_sql_mcp_demonstrations_need_longer_turns_than_the_default(tiny_tokenizer, tmp_path):
    from forge_agent.env.resolved import ResolvedEnv
    from forge_agent.rollout.config import ContextConfig, RolloutConfig
    from forge_agent.rollout.renderer import ChatRenderer
    from forge_agent.warm_start import (
        DEMO_LENGTHS_FILE,
        demo_fit_warnings,
        demo_lengths,
        demo_trajectory,
        demonstrations,
    )

    convos, tools = demonstrations(ResolvedEnv.of("sql_mcp"), 8, demo_fraction=1.0, seed=0)
    renderer = ChatRenderer(tiny_tokenizer)
    lengths = demo_lengths([demo_trajectory(renderer, c, tools) for c in convos])
    assert 48 < lengths["turn_tokens"] <= 96 < lengths["episode_tokens"] <= 512, lengths
    (tmp_path / DEMO_LENGTHS_FILE).write_text(json.dumps(lengths))

    warnings = demo_fit_warnings(tmp_path, RolloutConfig())  # the defaults: 48 a turn, 512
    assert len(warnings) == 1
    assert "rollout.max_new_tokens_per_turn=48" in warnings[0]
    assert f"set rollout.max_new_tokens_per_turn={lengths['turn_tokens']}" in warnings[0]
    assert demo_fit_warnings(tmp_path, RolloutConfig(max_new_tokens_per_turn=96)) == []
    short = RolloutConfig(max_new_tokens_per_turn=96, max_total_tokens=128)
    assert "rollout.max_total_tokens=128" in demo_fit_warnings(tmp_path, short)[0]
    compacted = RolloutConfig(
        max_new_tokens_per_turn=96,
        max_total_tokens=128,
        context=ContextConfig(strategy="drop_tool_outputs"),
    )
    assert demo_fit_warnings(tmp_path, compacted) == []  # compacted past the limit, not cut
    assert demo_fit_warnings(tmp_path / "no-record", RolloutConfig()) == []  # older folders
