"""The npu device's random number generators (torch_npu's ``torch.npu.manual_seed`` & co).

npu random ops compute on the host with torch's CPU kernels; without an explicit generator they
use the generator of their npu device kept here (one per device), not torch's CPU default one,
so seeding the npu does not disturb CPU streams and vice versa (as with torch_npu).
``torch.manual_seed`` seeds these too (PyTorch calls the device module's ``manual_seed_all``).
"""

from __future__ import annotations

import torch

_generators: dict[int, torch.Generator] = {}
_initial: dict[int, int] = {}


def generator(index: int = 0) -> torch.Generator:
    """The generator of ``npu:index`` (created on first use with a nondeterministic seed)."""
    g = _generators.get(index)
    if g is None:
        g = torch.Generator()
        _initial[index] = g.seed()
        _generators[index] = g
    return g


def _index(device: int | str | torch.device | None) -> int:
    from pycann.torch.npu import _device_index

    return _device_index(device)


def manual_seed(seed: int) -> None:
    """Seed the current npu device's generator."""
    idx = _index(None)
    generator(idx).manual_seed(int(seed))
    _initial[idx] = int(seed)


def manual_seed_all(seed: int) -> None:
    """Seed every npu device's generator."""
    from pycann.torch.npu import device_count

    for i in range(device_count()):
        generator(i).manual_seed(int(seed))
        _initial[i] = int(seed)


def seed() -> None:
    """Seed the current device's generator with a nondeterministic number."""
    idx = _index(None)
    _initial[idx] = generator(idx).seed()


def seed_all() -> None:
    """``seed`` on every device."""
    from pycann.torch.npu import device_count

    for i in range(device_count()):
        _initial[i] = generator(i).seed()


def initial_seed() -> int:
    """The seed the current device's generator started from."""
    idx = _index(None)
    generator(idx)
    return _initial[idx]


def get_rng_state(device: int | str | torch.device | None = None) -> torch.Tensor:
    """The generator state of ``device`` (a uint8 CPU tensor, as torch.cuda.get_rng_state)."""
    return generator(_index(device)).get_state()


def set_rng_state(new_state: torch.Tensor, device: int | str | torch.device | None = None) -> None:
    """Restore a state from ``get_rng_state``."""
    generator(_index(device)).set_state(new_state.cpu())


def get_rng_state_all() -> list[torch.Tensor]:
    """``get_rng_state`` of every device."""
    from pycann.torch.npu import device_count

    return [get_rng_state(i) for i in range(device_count())]


def set_rng_state_all(new_states: list[torch.Tensor]) -> None:
    """``set_rng_state`` on every device."""
    for i, s in enumerate(new_states):
        set_rng_state(s, i)
