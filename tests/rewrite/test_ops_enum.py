"""rewrite.ops.FastEnumType: the op enums read like plain classes and still behave as enums."""

from __future__ import annotations

import pickle
import sys
from enum import EnumType

import pytest

from lower.opt_apply import OptOps
from rewrite.dtype import AddrSpace
from rewrite.ops import AxisType, FastEnumType, Ops

ENUMS = (Ops, AxisType, AddrSpace, OptOps)


@pytest.mark.parametrize("cls", ENUMS, ids=lambda c: c.__name__)
def test_every_name_reads_as_type_reads_it(cls: type) -> None:
    # every member, method, property and enum bookkeeping attribute, and the names the class inherits (Enum's
    # _missing_, an IntEnum's from_bytes): what type's own lookup gives; a dunder defined by both the metaclass
    # and the bases is the one documented difference, so only the dunders Python code reads off a class count
    names = {n for n in set(dir(cls)) | set(dir(type(cls))) | set(vars(cls)) if not n.startswith("__")}
    names |= {"_missing_", "__name__", "__qualname__", "__module__", "__doc__", "__members__",
              "__class__", "__mro__", "__dict__", "__new__"} | ({"from_bytes"} if issubclass(cls, int) else set())
    assert {m.name for m in cls} <= names
    for name in sorted(names):
        want = type.__getattribute__(cls, name)
        got = getattr(cls, name)
        assert got is want or got == want, name


@pytest.mark.parametrize("cls", ENUMS, ids=lambda c: c.__name__)
def test_misses_and_enum_api(cls: type) -> None:
    with pytest.raises(AttributeError):
        _ = cls.no_such_member  # type: ignore[attr-defined]
    assert not hasattr(cls, "no_such_member")
    members = list(cls)
    assert len(cls) == len(members) and isinstance(cls, EnumType) and isinstance(cls, FastEnumType)
    for m in members:
        assert cls[m.name] is m and cls(m.value) is m and m in cls and isinstance(m, cls)
        assert pickle.loads(pickle.dumps(m)) is m


def test_members_stay_in_the_class_dict() -> None:
    # the fast path reads members from the class's own __dict__ (where Python 3.11+ puts every member)
    for cls in ENUMS:
        assert all(vars(cls)[m.name] is m for m in cls)


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="3.12's EnumType has no __getattr__: nothing to bypass")
def test_reads_take_the_generic_path() -> None:
    assert type(Ops).__getattribute__ is object.__getattribute__
    assert Ops.ADD is Ops.__dict__["ADD"] and AxisType.UPCAST.letter == "u"
