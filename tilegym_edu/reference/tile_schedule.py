"""Which query tiles each program of an attention kernel takes, decided on the host.

A tile is one block of BLOCK_M queries of one (batch, head): tile number ``bh * n_m + m`` for
query block m of the ``n_m`` a head has. Under a causal mask the tiles are unequal: query block
m sees only the key blocks up to its diagonal, so at 2048 queries in tiles of 128 the shortest
sees 1 key block and the longest 16. A persistent grid (one program per SM, each taking tile
after tile) that hands the tiles out in turn (tile p, p + grid, ...) leaves some programs far
more work than others: at B8 H16 S2048, head size 64 causal, 2048 tiles of 128 rows over 132
programs got 112 to 160 key blocks each (the slowest 1.19x the mean), and in tiles of 192 rows
1.72x. The schedules here instead assign the longest tile left to the least-loaded program
(longest processing time first, LPT), which brings the slowest within 1-2% of the mean.

A schedule is two int32 tensors: ``order`` (n_tiles,), the tile numbers program by program,
and ``starts`` (programs + 1,), where program p's tiles begin in ``order`` (they end where
program p + 1's begin). The kernel reads them; nothing here needs a GPU.
"""
import heapq

import torch


def key_blocks(n_m: int, seq_q: int, seq_k: int, block_m: int, block_n: int,
               causal: bool) -> list[int]:
    """How many key blocks of ``block_n`` each query block m = 0 .. n_m - 1 of ``block_m``
    queries sees: every one of the seq_k // block_n if not causal, else up to its last query's
    diagonal (the mask aligned to the end: query i sees keys up to i + seq_k - seq_q), at most
    all of them (a last block that runs past seq_q)."""
    if not causal:
        return [seq_k // block_n] * n_m
    shift = seq_k - seq_q
    return [min(-(-(m * block_m + shift + block_m) // block_n), seq_k // block_n)
            for m in range(n_m)]


def one_tile_a_program(n_bh: int, blocks: list[int], causal: bool):
    """(order, starts) for a grid of one program per tile, the GPU handing programs out in
    order: each head's tiles consecutive (the programs running at once share its keys in L2),
    longest first when causal, so the programs that finish early take the short ones."""
    n_m = len(blocks)
    rows = range(n_m - 1, -1, -1) if causal else range(n_m)
    order = [bh * n_m + m for bh in range(n_bh) for m in rows]
    return (torch.tensor(order, dtype=torch.int32),
            torch.arange(len(order) + 1, dtype=torch.int32))


def head_groups(n_bh: int, n_m: int, programs: int, most_heads: int) -> list[range]:
    """The (batch, head)s in groups of consecutive heads, near-equal in size: at most
    ``most_heads`` a group, but at least two tiles a program (n_m tiles a head) where there
    are heads enough, so the programs' work within a group can be balanced."""
    fewest = -(-2 * programs // n_m)
    n_groups = min(-(-n_bh // max(most_heads, fewest)), max(1, n_bh // fewest))
    bounds = [round(i * n_bh / n_groups) for i in range(n_groups + 1)]
    return [range(a, b) for a, b in zip(bounds[:-1], bounds[1:])]


def balanced(n_bh: int, blocks: list[int], programs: int, per_tile: float = 1.0,
             most_heads: int | None = None):
    """(order, starts) for a persistent grid of ``programs``: the heads in groups of at most
    ``most_heads`` (head_groups; None: one group), and one group after another, its tiles
    longest first, each to the program with the least work so far (work: key blocks, plus
    ``per_tile`` blocks' worth for loading q and storing the output); each program's tiles then
    in tile order. So the programs work through the heads together, a group at a time, and
    the keys and values they read at once are the group's: flash_hopper makes a group's fit
    in half the L2. At B4 H32 S4096 D128 causal in tiles of 128, groups of 12 heads leave the
    programs at any moment on 12 heads (24 MiB; an H100's L2 holds 50 MiB, an H200's 60)
    where one group left them on 36-40 (80 MiB); the slowest program has 1.0% more than the
    mean work (0.2% in one group). Equal tiles (not causal) fall to programs in turn, as tile
    p, p + programs, ... would."""
    n_m = len(blocks)
    loads = [(0.0, p) for p in range(programs)]
    lists = [[] for _ in range(programs)]
    for heads in head_groups(n_bh, n_m, programs, most_heads or n_bh):
        tiles = range(heads.start * n_m, heads.stop * n_m)
        for tile in sorted(tiles, key=lambda t: (-blocks[t % n_m], t)):
            load, p = heapq.heappop(loads)
            lists[p].append(tile)
            heapq.heappush(loads, (load + blocks[tile % n_m] + per_tile, p))
    order = [tile for tiles_of_p in lists for tile in sorted(tiles_of_p)]
    starts = [0]
    for tiles_of_p in lists:
        starts.append(starts[-1] + len(tiles_of_p))
    return torch.tensor(order, dtype=torch.int32), torch.tensor(starts, dtype=torch.int32)
