"""flash_hopper without a GPU: its Gluon kernels run only on Hopper (tests/gpu/
test_flash_hopper_gpu.py), so here attention_forward must fall back to flash.py and say nothing
different, hopper_flash_forward must refuse with a message that says what to use, and the
search space must keep the invariant the kernels rely on (no block reaches the next head)."""
import pytest
import torch

from tests.test_flash import make_inputs
from tilegym_edu.reference import flash, flash_hopper, tile_schedule
from tilegym_edu.tune import Config

pytestmark = pytest.mark.beside

SMALL = Config(BLOCK_M=16, BLOCK_N=16, num_warps=4, num_stages=1)


def inputs(shape, seed=0):
    return make_inputs({"shape": shape, "dtype": torch.float32},
                       torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_attention_forward_falls_back_to_flash_py_without_a_hopper_gpu(causal, monkeypatch):
    q, k, v = inputs((1, 4, 2, 19, 23, 32))
    assert not flash_hopper.hopper_fits(q, k, v)
    launched = []
    real = flash.flash_forward

    def recorded(*args, **kwargs):
        launched.append(args)
        return real(*args, config=SMALL)
    monkeypatch.setattr(flash_hopper, "flash_forward", recorded)
    o, lse = flash_hopper.attention_forward(q, k, v, causal)
    assert launched, "attention_forward did not run flash.py's forward"
    expected = flash.attention_reference(q.double(), k.double(), v.double(), causal)
    assert torch.allclose(o.double(), expected, atol=1e-4)
    assert lse.shape == q.shape[:3]


def test_hopper_flash_forward_says_what_to_use_instead():
    q, k, v = inputs((1, 2, 2, 128, 128, 64))
    with pytest.raises(ValueError, match="flash.flash_forward"):
        flash_hopper.hopper_flash_forward(q, k, v)


def test_attention_forward_checks_its_inputs_as_flash_forward_does():
    q, k, v = inputs((1, 4, 2, 16, 16, 32))
    with pytest.raises(ValueError, match="multiple of"):
        flash_hopper.attention_forward(q[:, :3], k, v)


def test_no_configuration_reads_past_a_head():
    """The kernels read q, k and v as one matrix of rows: a key/value block must end where a
    head ends, which HOPPER_SEQ_MULTIPLE guarantees only if every BLOCK_N divides it; so must
    one warpgroup's BLOCK_M, while the warp-specialised kernel's query tiles of 64 rows a
    consumer may run past a head (rows it does not store)."""
    assert flash_hopper.HOPPER_SPACE.default == Config(
        **dict(zip(("BLOCK_M", "BLOCK_N", "STAGES", "SCHEDULE"), flash_hopper.HOPPER_CONFIGS[0])))
    for config in flash_hopper.HOPPER_SPACE.configs(level=1):
        assert flash_hopper.HOPPER_SEQ_MULTIPLE % config["BLOCK_N"] == 0, config
        assert config["SCHEDULE"] in ("one", "specialised", *flash_hopper.PERSISTENT_SCHEDULES)
        if config["SCHEDULE"] == "one":
            assert flash_hopper.HOPPER_SEQ_MULTIPLE % config["BLOCK_M"] == 0, config
        else:  # two or three consumer warpgroups of 64 rows
            assert config["BLOCK_M"] in (128, 192), config


@pytest.mark.parametrize("head_dim", [64, 128])
def test_three_consumer_warpgroups_race_at_head_size_64_only(head_dim):
    problem = {"head_dim": head_dim, "causal": False}
    reasons = {c["BLOCK_M"]: flash_hopper.hopper_prune(c, problem, None)
               for c in flash_hopper.HOPPER_SPACE.configs(level=1)}
    assert reasons[128] is None and reasons[64] is None
    assert (reasons[192] is None) == (head_dim == 64), reasons[192]


@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_one_q_buffer_races_only_where_two_leave_o_no_room(causal, head_dim):
    """"persistent_q_once" is "persistent" but for q's buffers, which differ only on a causal
    grid; there two q buffers keep o's tiles out at head size 128, not at 64 (o_by_tma)."""
    problem = {"head_dim": head_dim, "causal": causal}
    raced = [c for c in flash_hopper.HOPPER_SPACE.configs(level=1)
             if c["SCHEDULE"] == "persistent_q_once"
             and flash_hopper.hopper_prune(c, problem, None) is None]
    assert [(c["BLOCK_M"], c["BLOCK_N"]) for c in raced] == ([(128, 128)] if causal
                                                             and head_dim == 128 else [])


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_the_kernels_schedule_is_balanced_only_on_a_persistent_grid(causal):
    """As many programs as tiles: one tile each, head by head (longest first when causal); fewer
    (one per SM): tile_schedule.balanced, in head groups of at most the heads given. Made once
    per problem (a captured launch replays the same tensors)."""
    cpu = torch.device("cpu")
    order, starts = flash_hopper.tile_schedule_on(cpu, 6, 4, 512, 512, 128, 128, causal, 24, 2)
    assert starts.tolist() == list(range(25))
    assert order.tolist()[:4] == ([3, 2, 1, 0] if causal else [0, 1, 2, 3])
    order, starts = flash_hopper.tile_schedule_on(cpu, 6, 4, 512, 512, 128, 128, causal, 3, 2)
    blocks = tile_schedule.key_blocks(4, 512, 512, 128, 128, causal)
    balanced = tile_schedule.balanced(6, blocks, 3, most_heads=2)
    assert (order.tolist(), starts.tolist()) == (balanced[0].tolist(), balanced[1].tolist())
    if causal:  # unequal tiles: the groups change who takes what
        assert order.tolist() != tile_schedule.balanced(6, blocks, 3)[0].tolist()
    assert flash_hopper.tile_schedule_on(cpu, 6, 4, 512, 512, 128, 128, causal, 3, 2)[0] is order


@pytest.mark.parametrize("kv_heads, expected", [(32, 12), (8, 50)])
def test_a_head_group_holds_the_keys_and_values_of_half_the_l2(monkeypatch, kv_heads, expected):
    """B4 H32 S4096 D128 in float16: 2 MiB of keys and values a head, 12 heads in half of an
    H100's 50 MiB L2; four query heads to a key/value head (grouped-query), 0.5 MiB, 50."""
    props = type("Props", (), {"L2_cache_size": 50 * 2**20})()
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: props)
    k = torch.empty(4, kv_heads, 4096, 128, dtype=torch.float16, device="meta")
    assert flash_hopper.heads_in_half_l2(k, 32) == expected


def test_the_causal_mask_in_floats_keeps_exactly_the_keys_up_to_each_query():
    """The Gluon kernels mask a score as min(s, BIG * (query - key) + BIG / 2) in float32: for
    every query-key distance up to 128k tokens the bound must sit far above any score where the
    key is visible and far below where it is not, whether the compiler rounds once (FFMA) or
    twice."""
    big = flash_hopper.MASK_BIG.value
    distance = torch.arange(-(1 << 17), (1 << 17) + 128)       # query - first key of the block
    keys = torch.arange(128)
    rows = distance.float() * big + 0.5 * big
    twice = rows[:, None] - keys.float()[None, :] * big
    once = (rows.double()[:, None] - keys.double()[None, :] * big).float()
    visible = distance[:, None] >= keys[None, :]
    for bound in (twice, once):
        assert torch.isfinite(bound).all()
        assert (bound[visible] > 1e29).all() and (bound[~visible] < -1e29).all()


def test_q_is_double_buffered_only_on_a_causal_persistent_grid_where_it_fits():
    """Run 54 (H100): a second q buffer paid where causal tiles differ in length and cost 1-5%
    where they do not; a program with one tile has no next q; 192 x 128 at head size 128 has
    no room for it beside the ring."""
    buffers = flash_hopper.q_buffers
    assert buffers(True, True, 128, 128, 2, 128) == 2
    assert buffers(True, False, 128, 128, 2, 128) == 1
    assert buffers(False, True, 128, 128, 2, 128) == 1
    assert buffers(True, True, 192, 128, 2, 128) == 1
    assert buffers(True, True, 192, 128, 2, 64) == 2


def test_o_leaves_by_tma_only_from_two_consumers_into_a_contiguous_o_where_it_fits():
    """Run 63 (H100): a TMA store from a shared tile per consumer took B16 H16 S1024 D128 from
    1.00x to 1.04x cuDNN. The tile needs 16 KiB a consumer at head size 128, which two q
    buffers leave no room for; three consumers (BLOCK_M 192) have a last tile past seq_q, where
    a TMA store of whole blocks would write the next head's rows; a strided o is no one matrix
    of rows."""
    def o(head_dim, contiguous=True):
        t = torch.empty(2, 256, 4, head_dim)
        return t.permute(0, 2, 1, 3).contiguous() if contiguous else t.transpose(1, 2)
    fits = flash_hopper.o_by_tma
    assert fits(o(128), 1, 128, 128, 2)
    assert not fits(o(128), 2, 128, 128, 2)
    assert fits(o(64), 2, 128, 128, 2)
    assert not fits(o(64), 1, 192, 128, 2)
    assert not fits(o(128, contiguous=False), 1, 128, 128, 2)
