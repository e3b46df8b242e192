"""verl 0.9.1 on CPU: a platform plugin plus two patches, loaded in the driver and in every Ray worker.

verl has no CPU device (it falls back to CUDA/NCCL, `../shared/research/verl-cpu.md`), but its FSDP2 engine is
device-generic. `rllm.training.backends.verl` sets, for the whole Ray job (`CPU_ENV` there):

    VERL_PLATFORM=cpu                       select the platform registered below
    VERL_USE_EXTERNAL_MODULES=<this module> `import verl` imports this module in every process (verl's own hook)
    VERL_ENGINE_DEVICE=cuda                 the FSDP engine is registered for cuda/npu only; its code runs on CPU

Never import this module before verl: verl imports it. Pinned to verl 0.9.1 (the patches touch its internals);
the backend refuses any other version (`rllm.training.backends.verl.VERL_VERSION`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import types
from typing import Any

import torch


def _noop(*args: Any, **kwargs: Any) -> None:
    return None


def _zero(*args: Any, **kwargs: Any) -> int:
    return 0


# verl calls the device module for memory stats, seeds, caches and the device name (FLOPs counter): on CPU these
# are no-ops or constants; everything else falls through to torch.cpu.
_DEVICE_MODULE = types.SimpleNamespace(
    **{
        **{name: getattr(torch.cpu, name) for name in dir(torch.cpu) if not name.startswith("_")},
        **dict.fromkeys(
            (
                "empty_cache",
                "manual_seed",
                "manual_seed_all",
                "reset_peak_memory_stats",
                "set_device",
                "synchronize",
                "ipc_collect",
            ),
            _noop,
        ),
        **dict.fromkeys(("max_memory_allocated", "max_memory_reserved", "memory_allocated", "memory_reserved"), _zero),
        "current_device": lambda: "cpu",
        # verl's checkpoints save the CPU RNG as "cpu" and restore "the device's" RNG under that key: the same one
        "get_rng_state": torch.get_rng_state,
        "set_rng_state": torch.set_rng_state,
        "get_device_name": lambda *a, **k: "CPU",
        "is_available": lambda: True,
        "device_count": lambda: 1,
        "mem_get_info": lambda *a, **k: (0, 0),
        "memory_stats": lambda *a, **k: {},
    }
)


def _register_platform() -> None:
    from verl.plugin.platform.platform_base import PlatformBase
    from verl.plugin.platform.platform_manager import PlatformRegistry

    if "cpu" in PlatformRegistry.registered_names():
        return

    @PlatformRegistry.register(platform="cpu")
    class CPUPlatform(PlatformBase):
        device_name = "cpu"
        vendor_name = "cpu"
        device_module = _DEVICE_MODULE

        def is_available(self) -> bool:
            return True

        def is_platform_available(self, use_smi_check: bool = False) -> bool:
            return False  # never auto-detected: only chosen by VERL_PLATFORM=cpu

        def current_device(self) -> str:  # type: ignore[override]
            return "cpu"

        def device_count(self) -> int:
            return 1

        set_device = synchronize = manual_seed = manual_seed_all = set_allocator_settings = empty_cache = staticmethod(
            _noop
        )

        def get_device_capability(self, device_index: int = 0) -> tuple[None, None]:
            return None, None

        def communication_backend_name(self) -> str:
            return "gloo"

        def visible_devices_envvar(self) -> str:
            return "CUDA_VISIBLE_DEVICES"

        @contextlib.contextmanager
        def nvtx_range(self, msg: str):
            yield

        profiler_start = profiler_stop = staticmethod(_noop)

        def ray_resource_name(self) -> str:
            return "CPU"

        def ray_resource_options(self, num_gpus: float) -> dict[str, Any]:
            return {"num_cpus": num_gpus}  # Ray takes CPUs as num_cpus, never as a custom resource

        def ray_noset_envvars(self) -> list[str]:
            return []

        def is_ipc_supported(self) -> bool:
            return False

        def cudart(self) -> None:
            return None


def _patch() -> None:
    import torch.distributed.fsdp as fsdp
    import verl.utils.distributed as distributed

    # Patch 1: verl builds the process-group backend as "cpu:gloo,{device}:{backend}", which on CPU names the cpu
    # device twice ("Duplicate device type cpu"); plain gloo is what CPU ranks need.
    original = distributed.initialize_global_process_group_ray
    if not getattr(original, "_rllm_cpu", False):

        def initialize_gloo(timeout_second: int | None = None, backend: str | None = None) -> None:
            original(timeout_second=timeout_second, backend=backend or "gloo")

        initialize_gloo._rllm_cpu = True  # type: ignore[attr-defined]
        distributed.initialize_global_process_group_ray = initialize_gloo

    # Patch 2: the forward-only (ref) engine asks FSDP2 for CPUOffloadPolicy(pin_memory=True); pinning needs an
    # accelerator ("Cannot access accelerator device when none is available").
    if not getattr(fsdp.CPUOffloadPolicy, "_rllm_cpu", False):

        @dataclasses.dataclass
        class UnpinnedCPUOffloadPolicy(fsdp.CPUOffloadPolicy):
            _rllm_cpu = True

            def __post_init__(self) -> None:
                self.pin_memory = False

        fsdp.CPUOffloadPolicy = UnpinnedCPUOffloadPolicy


_register_platform()
_patch()
