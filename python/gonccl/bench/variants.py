"""What a bench run measures: torch backends by name, and gonccl's two data paths.

``gonccl-auto``, ``gonccl-samegpu``, ``gonccl-device`` and ``gonccl-staged`` are gonccl
with ``GONCCL_DEVICE_PATH=auto``, ``=samegpu``, ``=1`` and ``=0`` set while their process
group is created (gonccl reads it then), so one run prints gonccl's own choice, the
same-GPU path (when every rank shares one GPU), the forced device path, the forced staged
path and Gloo side by side, over the same processes and tensors. ``gonccl-model``
(``GONCCL_DEVICE_PATH=model``) is the cost model's choice among every path the GPUs allow,
run on a GPU before or not. ``gonccl-plain`` and
``gonccl-tls`` do the same with ``GONCCL_TLS=0`` and ``=1`` (the certificates come from the
environment), to measure what TLS costs between hosts, and ``gonccl-noresume`` with
``GONCCL_LINK_RETRY_MS=0``, to measure what resumable links cost. ``gonccl`` is gonccl as
the environment configures it.
"""

from __future__ import annotations

import os

import torch
import torch.distributed as dist

# name -> (torch backend, environment while its group is created)
VARIANTS = {
    "gonccl-auto": ("gonccl", {"GONCCL_DEVICE_PATH": "auto"}),
    "gonccl-samegpu": ("gonccl", {"GONCCL_DEVICE_PATH": "samegpu"}),
    "gonccl-model": ("gonccl", {"GONCCL_DEVICE_PATH": "model"}),
    "gonccl-device": ("gonccl", {"GONCCL_DEVICE_PATH": "1"}),
    "gonccl-staged": ("gonccl", {"GONCCL_DEVICE_PATH": "0"}),
    "gonccl-plain": ("gonccl", {"GONCCL_TLS": "0"}),
    "gonccl-tls": ("gonccl", {"GONCCL_TLS": "1"}),
    "gonccl-noresume": ("gonccl", {"GONCCL_LINK_RETRY_MS": "0"}),
}

# What the TLS variants mean, for the table's header.
NOTES = {
    "gonccl-plain": "gonccl-plain: gonccl with GONCCL_TLS=0 (plain TCP between hosts)",
    "gonccl-tls": "gonccl-tls: gonccl with GONCCL_TLS=1 (TLS 1.3 between hosts; certificates from GONCCL_TLS_CERT, "
                  "GONCCL_TLS_KEY, GONCCL_TLS_CA)",
    "gonccl-noresume": "gonccl-noresume: gonccl with GONCCL_LINK_RETRY_MS=0 (links between hosts are plain TCP "
                       "connections, not resumable sessions)",
}

# The bench's default on CPU tensors; on CUDA ones, default_backends adds the paths.
CPU_DEFAULT = ["gonccl", "gloo"]


def default_backends(device: str, nranks: int) -> list[str]:
    """cpu: gonccl and Gloo. cuda: gonccl's own choice, its same-GPU path, its device path,
    its staged path and Gloo, and NCCL where each rank has a GPU of its own (NCCL refuses two ranks on one
    GPU unless told otherwise)."""
    if device != "cuda":
        return list(CPU_DEFAULT)
    out = ["gonccl-auto", "gonccl-samegpu", "gonccl-device", "gonccl-staged", "gloo"]
    if dist.is_nccl_available() and torch.cuda.is_available() and nranks <= torch.cuda.device_count():
        out.append("nccl")
    return out


def is_gonccl(name: str) -> bool:
    return name == "gonccl" or name in VARIANTS


def new_group(name: str, timeout):
    """A process group over every rank for backend `name` (a torch backend or a VARIANTS key)."""
    backend, env = VARIANTS.get(name, (name, {}))
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        return dist.new_group(backend=backend, timeout=timeout)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def ratio_pairs(names: list[str]) -> list[str]:
    """The gonccl rows that get a ratio against Gloo's in the same run."""
    return [n for n in names if is_gonccl(n)] if "gloo" in names else []
