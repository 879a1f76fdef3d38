"""Argument checks shared by the public functions: each failure names the function, the argument, what was
expected and what it got (TypeError for a wrong kind of value or dtype, ValueError for a wrong value, shape or
device), before anything reaches torch.ops.dflash, whose own errors on other devices (meta, fake) would only say
that no kernel is registered."""
from __future__ import annotations

import numbers
from typing import Iterable, Optional

import torch

# The devices the fused ops have kernels for; the reference runs wherever LibTorch's own ops do.
OP_DEVICE_TYPES = ("cpu", "cuda")


def integer(fn: str, name: str, value, minimum: Optional[int] = None) -> int:
    """``value`` as an int: an integral number (not a bool, not a float such as 4.0) at least ``minimum``."""
    if isinstance(value, torch.Tensor) and value.dim() == 0 and not value.is_floating_point() \
            and value.dtype != torch.bool:
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{fn}: {name} must be an int, got {type(value).__name__} {value!r}")
    if minimum is not None and value < minimum:
        raise ValueError(f"{fn}: {name} must be >= {minimum}, got {value}")
    return int(value)


def tensor(fn: str, name: str, value, kind: Optional[str] = None) -> torch.Tensor:
    """``value`` must be a tensor; ``kind``: "float" (a floating dtype), "int64", "bool", "int" (an integer dtype,
    not bool) or "int_or_bool"."""
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{fn}: {name} must be a torch.Tensor, got {type(value).__name__}")
    dt = value.dtype
    ok = {
        None: True,
        "float": dt.is_floating_point,
        "int64": dt == torch.int64,
        "bool": dt == torch.bool,
        "int": not dt.is_floating_point and not dt.is_complex and dt != torch.bool,
        "int_or_bool": not dt.is_floating_point and not dt.is_complex,
    }[kind]
    if not ok:
        want = {"float": "a floating dtype", "int64": "dtype torch.int64", "bool": "dtype torch.bool",
                "int": "an integer dtype", "int_or_bool": "dtype torch.bool or an integer dtype (0/1)"}[kind]
        raise TypeError(f"{fn}: {name} must have {want}, got {dt}")
    return value


def one_device(fn: str, named: Iterable[tuple[str, Optional[torch.Tensor]]], op_devices: bool) -> torch.device:
    """Every given tensor on the first one's device, which holds data (not meta); with ``op_devices`` it must be
    one the fused ops run on (cpu, cuda)."""
    named = [(n, t) for n, t in named if t is not None]
    first_name, first = named[0]
    dev = first.device
    for n, t in named[1:]:
        if t.device != dev:
            raise ValueError(f"{fn}: {n} is on {t.device} but {first_name} is on {dev}; every tensor argument must be "
                             "on one device")
    if dev.type == "meta":
        raise ValueError(f"{fn}: the tensors are on the meta device (no data), expected a cpu or cuda device")
    if op_devices and dev.type not in OP_DEVICE_TYPES:
        raise ValueError(f"{fn}: the tensors are on {dev}, expected a cpu or cuda device (the fused op has no kernel "
                         f"for {dev.type}; backend=\"reference\" runs the attention from LibTorch ops)")
    return dev


def shape(fn: str, name: str, t: torch.Tensor, want: str, ok: bool) -> None:
    if not ok:
        raise ValueError(f"{fn}: {name} must be {want}, got shape {list(t.shape)}")
