"""A one-pass check of a JSON text, in C (``_json_agreement.c``)."""

def msgspec_agrees(text: bytes | bytearray | memoryview, /) -> bool:
    """True when msgspec's typed decoding of ``text`` (one JSON value) can only agree with
    ``orjson.loads(text)``: the same acceptance and equal values for the fields it decodes, for
    any Struct type. False when it might not (the caller then uses orjson): invalid UTF-8 or an
    unpaired surrogate escape anywhere (msgspec does not check the strings it skips), an integer of
    19 digits or more (beyond 64 bits msgspec gives an int, orjson a float), a float exponent of 3
    digits or more or an integer part of more than 200 digits (msgspec does not range-check the
    numbers it skips), nesting deeper than 200 levels, a control character in a string."""
