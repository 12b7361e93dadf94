"""reverify.md §3.5 and §3.6 (item 62): every rejected shape gives its exact message."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gymflow.atif.errors import AtifError
from gymflow.atif.fields import ProfileError
from gymflow.atif.profile import parse_trajectory
from gymflow.atif.projection import build_body
from gymflow.atif.shapes import check_supported, reject_non_finite
from gymflow.atif.strict_json import loads
from tests.atif.builders import Doc, changed, materialized_row, text_trajectory, tool_trajectory


def project(doc: Doc, materialized: Doc | None = None) -> dict[str, Any]:
    """What ``atif_items`` does with one file's text after the hash checks."""
    document = loads(json.dumps(doc).encode())
    trajectory = parse_trajectory(document)
    check_supported(trajectory, document)
    return build_body(materialized if materialized is not None else materialized_row(), trajectory)


def rejection(doc: Doc, materialized: Doc | None = None) -> str:
    with pytest.raises((AtifError, ProfileError)) as caught:
        project(doc, materialized)
    return str(caught.value)


def step(doc: Doc, index: int, **fields: Any) -> Doc:
    return changed(doc, lambda d: d["steps"][index].update(fields))


def result(doc: Doc, index: int, **fields: Any) -> Doc:
    return changed(doc, lambda d: d["steps"][1]["observation"]["results"][index].update(fields))


def drop(doc: Doc, index: int, key: str) -> Doc:
    return changed(doc, lambda d: d["steps"][1]["observation"]["results"][index].pop(key))


def usage_doc(metrics: Doc | None, final: Doc | None) -> Doc:
    doc = text_trajectory()
    if metrics is not None:
        doc["steps"][1]["metrics"] = metrics
    if final is not None:
        doc["final_metrics"] = final
    return doc


TEXT = text_trajectory()
TOOL = tool_trajectory()
TOTALS = {"total_prompt_tokens": 2, "total_completion_tokens": 1}
PART = {"prompt_tokens": 2, "completion_tokens": 1}
SHAPES = [
    (
        text_trajectory(continued_trajectory_ref="t0"),
        "continued ATIF trajectories are not supported by the initial reverify adapter",
    ),
    (
        text_trajectory(continued_trajectory_ref=""),
        "continued ATIF trajectories are not supported by the initial reverify adapter",
    ),
    (
        text_trajectory(subagent_trajectories=[{"x": 1}]),
        "embedded subagent trajectories are not supported by the initial reverify adapter",
    ),
    (
        step(TEXT, 1, message=[{"type": "image", "source": {"media_type": "image/png", "path": "a.png"}}]),
        "multimodal ATIF content cannot be projected losslessly for reverification",
    ),
    (
        result(
            TOOL, 0, content=[{"type": "image", "source": {"media_type": "image/webp", "path": "a.webp"}}]
        ),
        "multimodal ATIF content cannot be projected losslessly for reverification",
    ),
    (
        step(TEXT, 0, is_copied_context=True),
        "copied continuation context is not supported; copied step IDs: [1]",
    ),
    (
        step(TEXT, 1, metrics={"prompt_token_ids": [1, 2]}),
        "step 2 contains training token metadata that the initial reverify adapter does not support",
    ),
    (
        step(TEXT, 1, metrics={"logprobs": [-0.5]}),
        "step 2 contains training token metadata that the initial reverify adapter does not support",
    ),
    (
        step(TOOL, 1, message="calling"),
        "agent step 2 contains both message text and tool calls; ATIF does not preserve their provider "
        "output-item ordering",
    ),
    (
        step(TEXT, 1, llm_call_count=2),
        "agent step 2 aggregates 2 LLM calls and cannot be projected into one ordered Responses sequence",
    ),
    (
        changed(TEXT, lambda d: d["steps"].append({"step_id": 3, "source": "user", "message": "more"})),
        "non-agent step 3 appears after agent output and would change the scored conversation",
    ),
    (
        step(TEXT, 0, observation={"results": []}),
        "non-agent step 1 contains an observation that cannot be projected into a response",
    ),
    (
        result(TOOL, 0, subagent_trajectory_ref=[{"id": "x"}]),
        "step 2 observation 0 references a subagent trajectory",
    ),
    (
        text_trajectory(steps=[{"step_id": 1, "source": "user", "message": "q"}]),
        "ATIF trajectory has no agent steps to score",
    ),
    (step(TEXT, 1, message=[]), "step 2 message contains an empty content-part list"),
    (step(TOOL, 1, message=[]), "step 2 message contains an empty content-part list"),
    (
        changed(
            TOOL,
            lambda d: (
                d["steps"][1]["tool_calls"][0].update(tool_call_id=" "),
                d["steps"][1]["observation"]["results"][1].update(source_call_id=" "),
            ),
        ),
        "step 2 contains a tool call with a blank tool_call_id",
    ),
    (
        changed(TOOL, lambda d: d["steps"][1]["tool_calls"][0].update(function_name="")),
        "step 2 tool call 'c1' has a blank function_name",
    ),
    (
        changed(
            TOOL,
            lambda d: (
                d["steps"][1]["tool_calls"][1].update(tool_call_id="c1"),
                d["steps"][1]["observation"]["results"].pop(0),
            ),
        ),
        "step 2 repeats tool_call_id 'c1'",
    ),
    (
        changed(
            TOOL,
            lambda d: d["steps"].__setitem__(
                2,
                {
                    "step_id": 3,
                    "source": "agent",
                    "message": "",
                    "tool_calls": [{"tool_call_id": "c1", "function_name": "again", "arguments": {}}],
                    "observation": {"results": [{"source_call_id": "c1", "content": "x"}]},
                },
            ),
        ),
        "ATIF trajectory repeats tool_call_id 'c1' across steps",
    ),
    (drop(TOOL, 0, "source_call_id"), "step 2 observation 0 has no source_call_id"),
    (result(TOOL, 0, source_call_id="zz"), "step 2 observation references unknown tool call 'zz'"),
    (
        changed(
            TOOL,
            lambda d: d["steps"][1]["observation"]["results"].append(
                {"source_call_id": "c1", "content": "x"}
            ),
        ),
        "ATIF trajectory contains multiple outputs for tool call 'c1'",
    ),
    (
        changed(TOOL, lambda d: d["steps"][1]["observation"]["results"].pop(0)),
        "step 2 has no observation result for tool call(s) 'c2'",
    ),
    (
        changed(TOOL, lambda d: d["steps"][1]["observation"].update(results=[])),
        "step 2 has no observation result for tool call(s) 'c1', 'c2'",
    ),
    (
        result(TOOL, 0, extra={"tool_result": "x"}),
        "step 2 observation 0 contains both content and Relay extra.tool_result",
    ),
    (result(TOOL, 0, content=[]), "step 2 observation 0 contains an empty content-part list"),
    (drop(TOOL, 0, "content"), "step 2 observation 0 has neither content nor Relay extra.tool_result"),
    (
        step(TEXT, 1, timestamp="2026-01-01T00:00:00"),
        "agent step 2 timestamp has no timezone and cannot produce a stable created_at",
    ),
    (
        step(TOOL, 2, model_name="other"),
        "ATIF agent steps resolve to multiple model names and cannot be represented by one verifier response",
    ),
    (
        changed(TOOL, lambda d: (d["agent"].pop("model_name"), d["steps"][1].update(model_name="m"))),
        "ATIF agent steps mix known and unknown model identity and cannot be represented by one "
        "verifier response",
    ),
    (
        usage_doc({"prompt_tokens": 1, "completion_tokens": 1, "cached_tokens": 2}, None),
        "step 2 cached_tokens exceeds prompt_tokens; cached tokens must be a subset",
    ),
    (
        usage_doc({"prompt_tokens": 1}, TOTALS),
        "ATIF contains partial per-model-step token metrics; every model step must provide both "
        "prompt_tokens and completion_tokens",
    ),
    (usage_doc(PART, None), "ATIF contains per-step token metrics without final_metrics"),
    (
        usage_doc(None, {**TOTALS, "total_cached_tokens": 3}),
        "ATIF final total_cached_tokens exceeds total_prompt_tokens; cached tokens must be a subset",
    ),
    (
        usage_doc(PART, {"total_cost_usd": 0.5}),
        "ATIF final_metrics omits token totals despite per-step token metrics",
    ),
    (
        usage_doc(None, {"total_cached_tokens": 0}),
        "ATIF final_metrics cannot represent total_cached_tokens without prompt and completion token totals",
    ),
    (
        usage_doc(None, {"total_prompt_tokens": 2}),
        "ATIF final_metrics must provide both prompt and completion token totals",
    ),
    (
        usage_doc(PART, {"total_prompt_tokens": 3, "total_completion_tokens": 1}),
        "ATIF final token totals do not match the complete per-model-step metrics",
    ),
    (
        usage_doc({**PART, "cached_tokens": 1}, {**TOTALS, "total_cached_tokens": 2}),
        "ATIF final cached-token total does not match the per-model-step metrics",
    ),
    (
        usage_doc({**PART, "extra": {"output_tokens_details": 5}}, TOTALS),
        "step 2 metrics.extra.output_tokens_details is not an object",
    ),
    (
        usage_doc(
            {
                **PART,
                "extra": {
                    "output_tokens_details": {"reasoning_tokens": 1},
                    "completion_tokens_details": {"reasoning_tokens": 0},
                },
            },
            TOTALS,
        ),
        "step 2 ATIF reasoning_tokens metadata conflicts between nested token-detail fields",
    ),
    (
        usage_doc(
            {**PART, "extra": {"reasoning_tokens": 0, "completion_tokens_details": {"reasoning_tokens": 1}}},
            TOTALS,
        ),
        "step 2 ATIF reasoning_tokens metadata conflicts between metrics.extra.reasoning_tokens and a nested "
        "token-detail field",
    ),
    (
        usage_doc({**PART, "extra": {"total_tokens": 2}}, TOTALS),
        "step 2 ATIF total_tokens metadata is smaller than prompt_tokens + completion_tokens",
    ),
    (
        usage_doc({**PART, "extra": {"reasoning_tokens": 2}}, TOTALS),
        "step 2 ATIF reasoning_tokens metadata exceeds completion_tokens",
    ),
    (
        usage_doc({**PART, "extra": {"total_tokens": "3"}}, TOTALS),
        "step 2 ATIF total_tokens metadata is not a non-negative integer",
    ),
    (
        usage_doc({**PART, "extra": {"total_tokens": True}}, TOTALS),
        "step 2 ATIF total_tokens metadata is not a non-negative integer",
    ),
]


@pytest.mark.parametrize(("doc", "message"), SHAPES, ids=[m[:60] for _, m in SHAPES])
def test_rejected_shape(doc: Doc, message: str) -> None:
    assert rejection(doc) == message


def test_materialized_row_without_params() -> None:
    row = materialized_row()
    del row["responses_create_params"]
    assert rejection(TEXT, row) == "materialized input has no responses_create_params object"
    assert rejection(TEXT, materialized_row(responses_create_params=[1])) == (
        "materialized input has no responses_create_params object"
    )


def test_non_finite_number_in_memory() -> None:
    with pytest.raises(AtifError) as caught:
        reject_non_finite({"steps": [{}, {"tool_calls": [{"arguments": {"x": float("inf")}}]}]})
    assert (
        str(caught.value)
        == "ATIF trajectory.steps[1].tool_calls[0].arguments.x contains non-finite JSON number inf"
    )


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        (text_trajectory(schema_version="ATIF-v1.6"), "schema_version: Input should be 'ATIF-v1.7'"),
        (text_trajectory(surprise=1), "surprise: Extra inputs are not permitted"),
        (changed(TEXT, lambda d: d["agent"].pop("version")), "agent.version: Field required"),
        (step(TEXT, 1, step_id=3), "steps[1].step_id: expected 2 (sequential from 1), got 3"),
        (step(TEXT, 1, step_id=True), "steps[1].step_id: Input should be a valid integer"),
        (step(TEXT, 1, source="tool"), "steps[1].source: Input should be 'system', 'user' or 'agent'"),
        (step(TEXT, 0, model_name="m"), "steps[0]: field 'model_name' is only valid for agent steps"),
        (
            step(TEXT, 1, llm_call_count=0, reasoning_content="x"),
            "steps[1]: llm_call_count=0 cannot include reasoning or LLM metrics",
        ),
        (
            step(TEXT, 1, timestamp="2026-01-01T00:00:00z"),
            "steps[1].timestamp: invalid ISO 8601 timestamp: "
            "Invalid isoformat string: '2026-01-01T00:00:00z'",
        ),
        (
            step(TEXT, 1, metrics={"prompt_tokens": "3"}),
            "steps[1].metrics.prompt_tokens: Input should be a valid integer",
        ),
        (
            step(TEXT, 1, metrics={"cached_tokens": -1}),
            "steps[1].metrics.cached_tokens: Input should be greater than or equal to 0",
        ),
        (
            step(TEXT, 1, metrics={"cost_usd": True}),
            "steps[1].metrics.cost_usd: Input should be a valid number",
        ),
        (
            step(TEXT, 1, metrics={"prompt_token_ids": [1, -1]}),
            "steps[1].metrics.prompt_token_ids: token IDs must be non-negative JSON integer arrays",
        ),
        (
            step(
                TEXT,
                1,
                message=[{"type": "text", "text": "a", "source": {"media_type": "image/png", "path": "p"}}],
            ),
            "steps[1].message[0]: text content parts cannot contain an image source",
        ),
        (
            step(TEXT, 1, message=[{"type": "image", "source": {"media_type": "image/bmp", "path": "p"}}]),
            "steps[1].message[0].source.media_type: "
            "Input should be 'image/jpeg', 'image/png', 'image/gif' or 'image/webp'",
        ),
        (
            step(TOOL, 1, observation={"results": [{"source_call_id": "c1", "x": 1}]}),
            "steps[1].observation.results[0].x: Extra inputs are not permitted",
        ),
        (
            changed(TOOL, lambda d: d["steps"][1]["tool_calls"][0].pop("arguments")),
            "steps[1].tool_calls[0].arguments: Field required",
        ),
        (
            text_trajectory(final_metrics={"total_steps": 5}),
            "final_metrics.total_steps must equal the number of trajectory steps: expected 2, got 5",
        ),
        (text_trajectory(steps=[]), "steps: List should have at least 1 item after validation, not 0"),
        (text_trajectory(agent=None), "agent: Input should be an object"),
    ],
)
def test_profile_rejections(doc: Doc, message: str) -> None:
    assert rejection(doc) == message


@pytest.mark.parametrize(
    "doc",
    [
        text_trajectory(subagent_trajectories=[]),
        result(TOOL, 0, subagent_trajectory_ref=[]),
        result(TOOL, 0, content=""),
        step(TEXT, 1, timestamp="2026-01-01 00:00:00+01:00"),
        step(TEXT, 1, timestamp="20260304T050607Z"),
        step(TEXT, 1, timestamp="2026-03-04T05:06:07,5Z"),
        step(step(TOOL, 1, timestamp="2026-01-01T00:00:00"), 2, timestamp="2026-01-01T00:00:00Z"),
        text_trajectory(
            notes="n", final_metrics={"total_steps": 2, "total_cost_usd": 0, "extra": {"any": [1]}}
        ),
        step(TEXT, 1, reasoning_effort="high", llm_call_count=1, extra={"provider": {"raw": True}}),
    ],
)
def test_accepted_shapes(doc: Doc) -> None:
    assert project(doc)["response"]["status"] == "completed"


def test_unreachable_forms_in_memory() -> None:
    """§3.6 forms that files cannot reach (the per-step checks and distinct id components pre-empt them)."""
    from gymflow.atif.projection import _Ids, _Output
    from gymflow.atif.usage import _usage_object

    output = _Output(_Ids("t1"))
    output.items = [{"id": "atif_1"}, {"id": "atif_2"}, {"id": "atif_1"}]
    with pytest.raises(AtifError) as caught:
        output.check_ids()
    assert str(caught.value) == "projected response repeats item id 'atif_1'"
    output.items = [{"id": "atif_1"}, {"id": "atif_2"}, {"id": "atif_3"}, {"id": " "}]
    with pytest.raises(AtifError) as caught:
        output.check_ids()
    assert str(caught.value) == "projected response item 3 has a blank or invalid id"
    with pytest.raises(AtifError) as caught:
        _usage_object(2, 1, None, None, 2)
    assert str(caught.value) == "ATIF total_tokens metadata is smaller than prompt_tokens + completion_tokens"
    with pytest.raises(AtifError) as caught:
        _usage_object(2, 1, None, 2, None)
    assert str(caught.value) == "ATIF reasoning_tokens metadata exceeds total completion tokens"
