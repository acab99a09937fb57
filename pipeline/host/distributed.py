"""Several training processes, one per GPU (PyTorch DDP), under `torchrun` or `accelerate launch`.

Every process runs the same `python -m pipeline train`; the launcher says which one it is through
the environment (`RANK`, `LOCAL_RANK`, `WORLD_SIZE`, set by both torchrun and accelerate launch).
This module reads that, joins the process group (gloo on CPU, NCCL on CUDA, through accelerate's
`PartialState`, the same state `transformers.Trainer` then uses for its DDP wrapper), and takes the
few decisions all processes must take together:

- `any_process(flag)`: True on every process when it is True on one (the STOP file, read by rank 0
  only, and a preflight that ran out of memory on any process), so all stop at the same step;
- `barrier()`: rank 0 has written the run folder before the others go on.

Only rank 0 (`is_main_process()`) writes the run folder's files; the trainer and Trainer guard that.
A single process without a launcher is world size 1: every function here is then a no-op.

This module deliberately does not start processes (torchrun / accelerate launch do; no home-made
process pool) and does not shard data (Trainer's accelerate dataloader gives each process every
N-th micro-batch of one seeded order, so N processes with `grad_accum / N` see the same rows per
optimizer step as one process with `grad_accum`).
"""

from __future__ import annotations

import os

from pipeline.errors import ConfigError
from pipeline.units import plural


def rank() -> int:
    """This process's global rank (0 without a launcher)."""
    return int(os.environ.get("RANK", "0") or 0)


def local_rank() -> int:
    """This process's rank on its machine: the GPU index it trains on (0 without a launcher)."""
    return int(os.environ.get("LOCAL_RANK", "0") or 0)


def world_size() -> int:
    """How many training processes take part (1 without a launcher)."""
    return max(1, int(os.environ.get("WORLD_SIZE", "1") or 1))


def local_world_size() -> int:
    """How many training processes run on this machine (1 without a launcher)."""
    return max(1, int(os.environ.get("LOCAL_WORLD_SIZE", os.environ.get("WORLD_SIZE", "1")) or 1))


def is_distributed() -> bool:
    """True under torchrun / accelerate launch with more than one process."""
    return world_size() > 1


def is_main_process() -> bool:
    """True on the process that writes the run folder (rank 0; the only process without a launcher)."""
    return rank() == 0


def placement(device: str) -> str:
    """Where this process puts the model: `cuda:LOCAL_RANK` for CUDA under a launcher (one GPU per
    process), else `device` unchanged ("cpu", "mps", "cuda")."""
    if device == "cuda" and is_distributed():
        return f"cuda:{local_rank()}"
    return device


def join(device: str) -> None:
    """Join the process group of a multi-process run (no-op for one process or when already joined).

    Args:
        device: the resolved training device, "cpu" or "cuda" ("mps" cannot be shared by processes).

    Raises:
        ConfigError: several processes on Apple MPS, or more CUDA processes on this machine than
            visible GPUs.
    """
    if not is_distributed():
        return
    import torch

    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return
    if device == "mps":
        raise ConfigError(
            f"{world_size()} training processes were started on Apple MPS, which one process uses at a time; "
            "start `python -m pipeline train` without torchrun / accelerate launch on a Mac."
        )
    if device == "cuda":
        gpus = torch.cuda.device_count()
        local_processes = local_world_size()
        if local_processes > gpus:
            raise ConfigError(
                f"{local_processes} training processes were started on this machine but only {plural(gpus, 'GPU')} {'is' if gpus == 1 else 'are'} "
                f"visible; start one per GPU (`--nproc_per_node {gpus}` / `--num_processes {gpus}`)."
            )
    from accelerate import PartialState

    PartialState(cpu=device == "cpu")  # gloo on CPU, NCCL on CUDA; Trainer reuses this state


def _collective_device():
    import torch

    if torch.distributed.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def any_process(flag: bool) -> bool:
    """True on every process when `flag` is True on at least one (an all-reduce MAX of one integer).

    Every process must call it at the same point, or the run hangs; without a launcher it returns
    `flag`.
    """
    if not is_distributed():
        return bool(flag)
    import torch

    value = torch.tensor([1 if flag else 0], dtype=torch.int64, device=_collective_device())
    torch.distributed.all_reduce(value, op=torch.distributed.ReduceOp.MAX)
    return bool(value.item())


def gather_ints(value: int) -> list[int]:
    """`value` from every process, in rank order (`[value]` without a launcher). Collective, as
    `any_process`."""
    if not is_distributed():
        return [int(value)]
    import torch

    mine = torch.tensor([int(value)], dtype=torch.int64, device=_collective_device())
    everyone = [torch.zeros_like(mine) for _ in range(world_size())]
    torch.distributed.all_gather(everyone, mine)
    return [int(t.item()) for t in everyone]


def barrier() -> None:
    """Wait until every process gets here (no-op without a launcher)."""
    if not is_distributed():
        return
    import torch

    torch.distributed.barrier()
