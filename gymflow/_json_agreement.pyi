"""One-pass checks of a JSON text, in C (``_json_agreement.c``)."""

def msgspec_agrees(text: bytes | bytearray | memoryview, wide_integers: bool = False, /) -> bool:
    """True when msgspec's typed decoding of ``text`` (one JSON value) can only agree with
    ``orjson.loads(text)``: the same acceptance and equal values for the fields it decodes, for
    any Struct type. False when it might not (the caller then reads the text exactly): invalid
    UTF-8 or an unpaired surrogate escape anywhere (msgspec does not check the strings it skips),
    a float beyond the finite range (msgspec does not range-check the numbers it skips), an
    integer beyond [-2**63, 2**64 - 1] (msgspec gives an int, orjson a float; allowed with
    ``wide_integers``, for a reader that keeps them exact as msgspec does, up to 200 digits),
    nesting deeper than
    200 levels, a control character or an unknown escape in a string."""

def object_members(
    text: bytes | bytearray | memoryview, names: tuple[bytes, ...], /
) -> tuple[slice | None, ...] | None:
    """The slices of ``text`` holding the values of its top-level members named ``names`` (None
    for one it lacks; the last of a repeated name), when ``text`` is one JSON object that
    ``orjson.loads`` reads and on which :func:`msgspec_agrees` holds, with no escape in a top-level
    key. None for any other text (the caller then reads it exactly): a single strict pass in C."""
