"""tile_schedule: which query tiles each program of flash_hopper's warp-specialised kernel takes.
The kernel trusts the schedule to name every tile exactly once; the balanced schedule must also
keep the slowest program near the mean where handing the tiles out in turn does not."""
import math

import pytest
import torch

from tilegym_edu.reference import tile_schedule

pytestmark = pytest.mark.beside

#: (n_bh, seq_q, seq_k, block_m, block_n, causal, programs)
PROBLEMS = [(128, 2048, 2048, 128, 128, True, 132),    # B8 H16 S2048 causal, tiles of 128
            (128, 2048, 2048, 192, 128, True, 132),    # the same in tiles of 192 (the last partial)
            (48, 1280, 1280, 128, 128, False, 132),    # not causal: every tile alike
            (4, 512, 1536, 128, 64, True, 7),          # queries at the end of a longer cache
            (3, 384, 384, 192, 128, True, 5)]


def blocks_of(n_bh, seq_q, seq_k, block_m, block_n, causal, programs):
    n_m = math.ceil(seq_q / block_m)
    return tile_schedule.key_blocks(n_m, seq_q, seq_k, block_m, block_n, causal)


def loads(order, starts, blocks):
    """The key blocks each program works through."""
    return [sum(blocks[t % len(blocks)] for t in order[a:b].tolist())
            for a, b in zip(starts[:-1].tolist(), starts[1:].tolist())]


def strided_loads(n_tiles, blocks, programs):
    """What tile p, p + programs, ... would give each program."""
    return [sum(blocks[t % len(blocks)] for t in range(p, n_tiles, programs))
            for p in range(programs)]


@pytest.mark.parametrize("problem", PROBLEMS, ids=str)
def test_key_blocks_reach_each_query_blocks_last_diagonal(problem):
    """Against the mask itself: a key block counts if any of its keys is visible to the block's
    last query (rows past seq_q included: a partial block computes them and stores nothing)."""
    n_bh, seq_q, seq_k, block_m, block_n, causal, programs = problem
    for m, n in enumerate(blocks_of(*problem)):
        last_query = m * block_m + block_m - 1
        visible = [j for j in range(seq_k // block_n)
                   if not causal or j * block_n <= last_query + seq_k - seq_q]
        assert n == len(visible), (m, n, len(visible))


@pytest.mark.parametrize("problem", PROBLEMS, ids=str)
@pytest.mark.parametrize("kind", ["one tile a program", "balanced", "balanced in head groups"])
def test_every_tile_is_taken_exactly_once(problem, kind):
    n_bh, *_, causal, programs = problem
    blocks = blocks_of(*problem)
    n_tiles = n_bh * len(blocks)
    if kind.startswith("balanced"):
        most_heads = 1 if kind.endswith("groups") else None  # groups as small as they may be
        order, starts = tile_schedule.balanced(n_bh, blocks, programs, most_heads=most_heads)
        assert len(starts) == programs + 1
    else:
        order, starts = tile_schedule.one_tile_a_program(n_bh, blocks, causal)
        assert starts.tolist() == list(range(n_tiles + 1))
    assert order.dtype == starts.dtype == torch.int32
    assert sorted(order.tolist()) == list(range(n_tiles))
    assert starts[0] == 0 and starts[-1] == n_tiles
    assert all(a <= b for a, b in zip(starts[:-1].tolist(), starts[1:].tolist()))


def test_one_tile_a_program_goes_head_by_head_longest_first_when_causal():
    blocks = [1, 2, 3]
    causal, _ = tile_schedule.one_tile_a_program(2, blocks, causal=True)
    full, _ = tile_schedule.one_tile_a_program(2, blocks, causal=False)
    assert causal.tolist() == [2, 1, 0, 5, 4, 3]
    assert full.tolist() == [0, 1, 2, 3, 4, 5]


@pytest.mark.parametrize("block_m, strided_worst", [(128, 1.15), (192, 1.5)])
def test_balanced_schedule_evens_out_causal_work(block_m, strided_worst):
    """B8 H16 S2048 causal on 132 programs: in turn, the slowest program has 1.19x (tiles of
    128) and 1.72x (192) the mean work; balanced, within 2%."""
    problem = (128, 2048, 2048, block_m, 128, True, 132)
    blocks = blocks_of(*problem)
    order, starts = tile_schedule.balanced(128, blocks, 132)
    mean = sum(blocks) * 128 / 132
    assert max(strided_loads(128 * len(blocks), blocks, 132)) / mean > strided_worst
    assert max(loads(order, starts, blocks)) / mean < 1.02


def test_balanced_programs_take_their_tiles_head_by_head():
    blocks = blocks_of(*PROBLEMS[0])
    order, starts = tile_schedule.balanced(128, blocks, 132)
    for a, b in zip(starts[:-1].tolist(), starts[1:].tolist()):
        mine = order[a:b].tolist()
        assert mine == sorted(mine)


def test_equal_tiles_fall_to_programs_in_turn():
    """Not causal, every tile is as long as the next: the balanced schedule is the strided one."""
    blocks = [10] * 10
    order, starts = tile_schedule.balanced(48, blocks, 132)
    for p, (a, b) in enumerate(zip(starts[:-1].tolist(), starts[1:].tolist())):
        assert order[a:b].tolist() == list(range(p, 480, 132))


@pytest.mark.parametrize("n_bh, n_m, programs, most_heads", [
    (128, 32, 132, 12), (16, 128, 132, 3), (128, 16, 132, 50), (32, 16, 132, 4), (3, 4, 5, 1),
    (8, 4, 2, 100)])
def test_head_groups_cover_every_head_in_near_equal_groups(n_bh, n_m, programs, most_heads):
    """As many groups as keep each to most_heads, but none with fewer than two tiles a program
    (then fewer, larger groups)."""
    groups = tile_schedule.head_groups(n_bh, n_m, programs, most_heads)
    assert [h for g in groups for h in g] == list(range(n_bh))
    sizes = [len(g) for g in groups]
    assert max(sizes) - min(sizes) <= 1
    fewest = math.ceil(2 * programs / n_m)
    assert len(groups) == 1 or min(sizes) >= fewest
    assert max(sizes) <= most_heads or n_bh // (len(groups) + 1) < fewest


def heads_at_once(order, starts, blocks, fraction):
    """The heads the programs are on once each has done ``fraction`` of the mean work."""
    n_m = len(blocks)
    per_program = [order[a:b].tolist() for a, b in zip(starts[:-1].tolist(), starts[1:].tolist())]
    mean = sum(blocks[t % n_m] for tiles in per_program for t in tiles) / len(per_program)
    heads = set()
    for tiles in per_program:
        done = 0
        for t in tiles:
            done += blocks[t % n_m]
            if done >= fraction * mean:
                heads.add(t // n_m)
                break
    return heads


@pytest.mark.parametrize("fraction", [0.25, 0.5, 0.75])
def test_programs_work_through_the_heads_a_group_at_a_time(fraction):
    """B4 H32 S4096 causal in tiles of 128 on 132 programs, groups of at most 12 heads: at any
    moment the programs are on 12 heads (14 allowed), not the 36-40 of one group, and the
    slowest has within 1.5% of the mean work."""
    blocks = tile_schedule.key_blocks(32, 4096, 4096, 128, 128, True)
    order, starts = tile_schedule.balanced(128, blocks, 132, most_heads=12)
    assert len(heads_at_once(order, starts, blocks, fraction)) <= 14
    assert max(loads(order, starts, blocks)) / (sum(blocks) * 128 / 132) < 1.015
    one_group = tile_schedule.balanced(128, blocks, 132)
    assert len(heads_at_once(*one_group, blocks, fraction)) >= 30
