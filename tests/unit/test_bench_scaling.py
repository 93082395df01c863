"""The scaling bench's section of RESULTS.md: each cluster size's rates and their ratios to one worker."""

from __future__ import annotations

from bench.scaling import Scaled, scaling_lines
from bench.throughput import Measurement, RouterRun


def _scaled(workers: int, passthrough_s: float, router_s: float) -> Scaled:
    return Scaled(workers, Measurement(10, passthrough_s, 200_000, RouterRun(router_s, 200_000, 0, ())))


def test_each_size_is_a_row_with_its_ratios_to_one_worker() -> None:
    lines = scaling_lines([_scaled(1, 4.0, 20.0), _scaled(2, 2.5, 12.5)])
    rows = [line for line in lines if line.startswith("| 1 |") or line.startswith("| 2 |")]
    assert rows == [
        "| 1 | 50,000 | 10,000 | 0.20 | 1.00x | 1.00x |",
        "| 2 | 80,000 | 16,000 | 0.20 | 1.60x | 1.60x |",
    ]
    assert "200,000 messages" in "\n".join(lines)


def test_no_sizes_no_section() -> None:
    assert scaling_lines([]) == []
