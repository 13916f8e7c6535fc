"""research/memory_parallelism.py: the global bytes a thread has in flight per round, read from PTX, and the memory
efficiency made from them (no GPU)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path[:0] = [str(Path(__file__).resolve().parent.parent / "research")]
import memory_parallelism as MP  # noqa: E402

from minicomp.search.static import ptx as P  # noqa: E402
from minicomp.search.static.ptx_parse import entry_body, parse_body  # noqa: E402

_PTX = """
.version 8.0
.target sm_90
.address_size 64
.visible .entry k(.param .u64 a)
{
  .reg .f32 %f<8>;
  .reg .b64 %rd<4>;
  .reg .b32 %r<4>;
  ld.param.u64 %rd1, [a];
  ld.global.v4.f32 {%f1, %f2, %f3, %f4}, [%rd1];
  ld.global.f32 %f5, [%rd1+16];
  add.f32 %f6, %f1, %f5;
  ld.global.f32 %f7, [%rd1+32];
  bar.sync 0;
  add.f32 %f6, %f6, %f7;
  %s
  ret;
}
"""


def _per_round(body: str, hoist: bool) -> float | None:
  ptx = _PTX.replace("%s", body)
  instrs, _ = parse_body(entry_body(ptx, "k")[1])
  return MP.bytes_per_round(instrs, P.analyze_ptx(ptx, "k").blocks, hoist)


def test_a_round_ends_where_a_pending_load_is_read_or_at_a_barrier():
  # in PTX order: {16 + 4 bytes} read by the add, then 4 bytes read after the barrier: 24 bytes over 2 rounds
  assert _per_round("", False) == 12.0
  # hoisted: a round ends only at the barrier (20 + 4 bytes before it) and the block's end: one round holds them all
  assert _per_round("", True) == 24.0


def test_cp_async_groups_in_flight_count_as_fractions_of_a_round():
  copies = "cp.async.cg.shared.global [%r1], [%rd1], 16;\n  cp.async.commit_group;\n  cp.async.wait_group 1;"
  # 24 bytes of loads in two rounds, 16 of copies in half a round (one younger group stays in flight)
  assert _per_round(copies, False) == (24 + 16) / 2.5


def test_no_global_loads_no_figure_and_the_efficiency_grows_with_the_bytes_in_flight():
  assert _per_round("", False) is not None
  assert MP.bytes_per_round([], ()) is None
  from minicomp.search.static.model import LaunchFacts
  from minicomp.target import get_device
  dev = get_device("h200")
  f = LaunchFacts(name="k", blocks=132, threads_per_block=128, per_thread={}, active_warps_per_sm=4.0,
                  blocks_per_sm=1, dram_bytes=0.0, l2_bytes=0.0, l1_cycles_per_block=0.0,
                  shared_wavefronts_per_block=0.0, chain_cycles=0.0, local_bytes_per_thread=0.0)
  as_model, low, high = MP.efficiency(f, dev, None), MP.efficiency(f, dev, 4.0), MP.efficiency(f, dev, 1e4)
  assert low == pytest.approx(as_model / 2) and as_model < 1.0 and high == 1.0
