"""Input content parts of a message (``input_text``, ``input_image``, ``input_file``, ``input_video``).

0.7.0 validates them as the SDK's typed dicts: the ``type`` selects the part, required keys must be
there, present keys are checked, unknown keys are dropped and the dump lists the present keys in
the declaration order. An ``input_video`` part needs exactly one source (``video_url`` or
``video``) holding a non-empty URL. The parts of a ``function_call_output`` list follow the
sibling definitions (:func:`output_item_part`): no video, an optional image ``detail`` and
nullable file fields.
"""

from __future__ import annotations

from typing import Any, Final

from gymflow.evidence.lax import fail, req_str

__all__ = ["input_part", "output_item_part"]

Obj = dict[str, Any]

_IMAGE_DETAIL: Final = frozenset({"low", "high", "auto", "original"})
_FILE_DETAIL: Final = frozenset({"low", "high"})


def _literal(value: Any, allowed: frozenset[str], where: str) -> str:
    if isinstance(value, str) and value in allowed:
        return value
    fail(where, f"must be one of {sorted(allowed)}: {value!r}")


def _opt_str(value: Any, where: str) -> str | None:
    if value is None or isinstance(value, str):
        return value
    fail(where, f"not a string: {value!r}")


def _text(part: Obj) -> Obj:
    return {"text": req_str(part.get("text"), "text"), "type": "input_text"}


def _image(part: Obj) -> Obj:
    out: Obj = {"detail": _literal(part.get("detail"), _IMAGE_DETAIL, "detail"), "type": "input_image"}
    for key in ("file_id", "image_url"):
        if key in part:
            out[key] = _opt_str(part[key], key)
    return out


def _file(part: Obj) -> Obj:
    out: Obj = {"type": "input_file"}
    if "detail" in part:
        out["detail"] = _literal(part["detail"], _FILE_DETAIL, "detail")
    for key in ("file_data", "file_id", "file_url", "filename"):
        if key in part:
            value = part[key]
            out[key] = _opt_str(value, key) if key == "file_id" else req_str(value, key)
    return out


def _video(part: Obj) -> Obj:
    sources = [key for key in ("video_url", "video") if key in part]
    if len(sources) != 1:
        fail("input_video", "exactly one of video_url or video is required")
    source = part[sources[0]]
    url = source.get("url") if isinstance(source, dict) else source
    if not isinstance(url, str) or not url.strip():
        fail(f"input_video.{sources[0]}", "a non-empty URL is required")
    return {"type": "input_video", sources[0]: source}


_PARTS: Final = {"input_text": _text, "input_image": _image, "input_file": _file, "input_video": _video}


def input_part(part: Any) -> Obj:
    """Validate one input content part; return its dump (a new object)."""
    if not isinstance(part, dict):
        fail("content[]", "an object is required")
    kind = part.get("type")
    build = _PARTS.get(kind) if type(kind) is str else None
    if build is None:
        fail("content[].type", f"not an input content part type: {kind!r}")
    return build(part)


def _output_image(part: Obj) -> Obj:
    out: Obj = {"type": "input_image"}
    if "detail" in part:
        detail = part["detail"]
        out["detail"] = None if detail is None else _literal(detail, _IMAGE_DETAIL, "detail")
    for key in ("file_id", "image_url"):
        if key in part:
            out[key] = _opt_str(part[key], key)
    return out


def _output_file(part: Obj) -> Obj:
    out: Obj = {"type": "input_file"}
    if "detail" in part:
        out["detail"] = _literal(part["detail"], _FILE_DETAIL, "detail")
    for key in ("file_data", "file_id", "file_url", "filename"):
        if key in part:
            out[key] = _opt_str(part[key], key)
    return out


_OUTPUT_PARTS: Final = {"input_text": _text, "input_image": _output_image, "input_file": _output_file}


def output_item_part(part: Any) -> Obj:
    """Validate one part of a ``function_call_output`` output list; return its dump."""
    if not isinstance(part, dict):
        fail("output[]", "an object is required")
    kind = part.get("type")
    build = _OUTPUT_PARTS.get(kind) if type(kind) is str else None
    if build is None:
        fail("output[].type", f"not an output content part type: {kind!r}")
    return build(part)
