"""The one reference index (``gymflow.evidence.references``) both the join and health resolve with."""

from __future__ import annotations

from gymflow.evidence.references import CallIndex, server_key

P = ("responses_api_models", "policy")
J = ("responses_api_models", "judge")


def _index() -> CallIndex:
    return CallIndex(
        [
            ("c1", P, "r1"),  # 0
            ("c2", P, ""),  # 1
            (None, P, "r3"),  # 2
            ("c4", J, "r3"),  # 3
            (None, P, "r3"),  # 4: same pair as 2
            ("", P, "r5"),  # 5: an empty id is not indexed by id
            (7, None, 8),  # 6: non-string values are never indexed
        ]
    )


def test_by_call_id_confirmed_by_server_and_response_when_given() -> None:
    index = _index()
    assert list(index.find("c1", None, None)) == [0]
    assert list(index.find("c1", P, "r1")) == [0]
    assert list(index.find("c1", J, None)) == []
    assert list(index.find("c1", None, "r2")) == []
    assert list(index.find("c2", None, "")) == [1]  # "" must equal ""
    assert list(index.find("c1", None, "")) == []
    assert list(index.find("nope", None, None)) == []


def test_by_server_and_response_id_without_a_call_id() -> None:
    index = _index()
    assert list(index.find(None, P, "r3")) == [2, 4]
    assert list(index.find("", J, "r3")) == [3]
    assert list(index.find(None, P, "r5")) == [5]
    assert list(index.find(None, None, "r3")) == []
    assert list(index.find(None, P, "")) == []
    assert list(index.find(None, None, 8)) == []
    assert list(index.find(7, None, None)) == []


def test_dumped_references_and_memo() -> None:
    index = _index()
    ref = {"model_call_id": None, "model_ref": {"type": P[0], "name": P[1]}, "response_id": "r3"}
    assert list(index.find_ref(ref)) == [2, 4]
    assert server_key("x") is None and server_key({"type": "t", "name": "n", "x": 1}) == ("t", "n")
    first = index.resolve(None, P, "r3")
    assert index.resolve(None, P, "r3") is first and list(first) == [2, 4]
