"""What a benchmark run measures and for how long: the full run and the quick smoke run."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Config:
    quick: bool
    rounds: int  # timing rounds per workload
    batch_s: float  # aim for batches (k repetitions) of about this long
    verify_reps: int  # repetitions run by each method for the bit-for-bit check
    tiny_ops: int  # W1
    tiny_dims: tuple[int, ...]
    compute_ops: int  # W2
    compute_dim: int
    compute_rounds: int  # W2 batches are long and the machine noisy: more rounds
    branch_count: int  # W4: independent chains of compute-bound launches
    branch_ops: int
    branch_dim: int
    demo_particles: int  # W3
    demo_substeps: int
    ladder: tuple[int, ...]  # graph sizes (ops) for the plot
    ladder_rounds: int
    capture_rounds: int
    persist_ops: int  # graph size for save/load and bytes per op
    persist_rounds: int


FULL = Config(
    quick=False, rounds=15, batch_s=0.025, verify_reps=3,
    tiny_ops=1000, tiny_dims=(1, 16),
    compute_ops=100, compute_dim=100_000, compute_rounds=31,
    branch_count=4, branch_ops=100, branch_dim=25_000,
    demo_particles=64, demo_substeps=8,
    ladder=(10, 100, 1000, 10_000, 100_000), ladder_rounds=5,
    capture_rounds=15, persist_ops=10_000, persist_rounds=9,
)

QUICK = Config(
    quick=True, rounds=2, batch_s=0.002, verify_reps=2,
    tiny_ops=1000, tiny_dims=(1, 16),
    compute_ops=10, compute_dim=10_000, compute_rounds=2,
    branch_count=2, branch_ops=4, branch_dim=10_000,
    demo_particles=64, demo_substeps=8,
    ladder=(10, 100), ladder_rounds=2,
    capture_rounds=2, persist_ops=1000, persist_rounds=2,
)
