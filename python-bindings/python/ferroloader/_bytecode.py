"""What a plain Python function does, read from its bytecode as steps spelled alike across
CPython 3.9-3.14, so the loader can recognize a few exact forms and take them natively: an
object whose call only calls the ``Compose`` it holds (``transforms.delegated_compose``), a
``collate_fn`` that only mixes the default collation (``_batchmix.collated_mixing``).

Must not call the functions it reads: a form it does not recognize runs as given.
"""

from __future__ import annotations

import dis
import inspect
import types
from typing import Any, List, Tuple

#: Bytecode of no effect on what a function computes (interpreter bookkeeping, inline caches,
#: the NULL pushed before a call, a closure's cells copied in).
_NO_EFFECT = frozenset(
    (
        "RESUME", "NOP", "CACHE", "PRECALL", "PUSH_NULL", "KW_NAMES", "EXTENDED_ARG",
        "NOT_TAKEN", "COPY_FREE_VARS",
    )
)

Step = Tuple[str, Any]


def plain_arguments(code: types.CodeType, count: int) -> bool:
    """Whether ``code`` takes exactly ``count`` plain positional arguments (no positional-only
    or keyword-only ones, no ``*args`` or ``**kwargs``)."""
    if code.co_argcount != count or code.co_kwonlyargcount or code.co_posonlyargcount:
        return False
    return not code.co_flags & (inspect.CO_VARARGS | inspect.CO_VARKEYWORDS)


def steps(code: types.CodeType) -> List[Step]:
    """``code``'s instructions as ``(opname, argval)``, those of no effect left out and the
    versions' spellings of one step made one: ``LOAD_FAST`` (and its ``_BORROW``/``_CHECK``
    forms), ``CALL`` (3.9-3.10's ``CALL_FUNCTION``), ``LOAD_ATTR`` (``LOAD_METHOD``)."""
    out: List[Step] = []
    for ins in dis.get_instructions(code):
        if ins.opname in _NO_EFFECT:
            continue
        name = ins.opname
        if name.startswith("LOAD_FAST"):
            name = "LOAD_FAST"
        elif name in ("CALL_FUNCTION", "CALL"):
            name = "CALL"
        elif name == "LOAD_METHOD":
            name = "LOAD_ATTR"
        out.append((name, ins.argval))
    return out


def jump_steps(code: types.CodeType) -> List[Step]:
    """:func:`steps`, each jump's target given as the index of the step it lands on rather
    than a byte offset (which inline caches and bookkeeping move between two compilations of
    one source), so that two functions of the same code compare equal."""
    kept = [ins for ins in dis.get_instructions(code) if ins.opname not in _NO_EFFECT]
    index = {ins.offset: i for i, ins in enumerate(kept)}
    out: List[Step] = []
    for (name, argval), ins in zip(steps(code), kept):
        if ins.opcode in dis.hasjrel or ins.opcode in dis.hasjabs:
            argval = next((index[o] for o in sorted(index) if o >= argval), None)
        out.append((name, argval))
    return out


def returned_directly(found: List[Step]) -> List[Step]:
    """``found`` with a result stored in a local and returned from it (``out = f(x); return
    out``, a typed copy's form) returned directly, as it computes the same."""
    end = found[-3:]
    if len(end) == 3 and end[0][0] == "STORE_FAST" and end[1:] == [("LOAD_FAST", end[0][1]), ("RETURN_VALUE", None)]:
        return found[:-3] + [("RETURN_VALUE", None)]
    if len(end) == 3 and end[1][0] == "STORE_FAST_LOAD_FAST" and end[2] == ("RETURN_VALUE", None):
        if len(set(end[1][1])) == 1:  # (stored, loaded): the same name
            return found[:-2] + [("RETURN_VALUE", None)]
    return found
