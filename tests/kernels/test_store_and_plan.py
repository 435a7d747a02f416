"""The KV store kernel and the vectorised plan arithmetic."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from thoughttree.kernels import plan_tree_attention, store_kv, store_kv_reference
from thoughttree.kernels.plan.decode_work import TAIL_PIECE, decode_work
from thoughttree.kernels.plan.topology import WALK_NODES, _preorder_by_jumping, _preorder_by_walk, concat_ranges, path_sums, preorder
from thoughttree.kernels.plan.tiles import SM_LIMITS, TileConfig, programs_per_sm, tile_shapes
from thoughttree.kernels.plan.tree_work import tree_host_work, tree_work
from thoughttree.kernels.plan.work_config import OWN_BLOCKS, WorkConfig
from thoughttree.kernels.plan.workplan import aligned_starts, upload_int32


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
@pytest.mark.parametrize("page_size,h_kv,d", [(16, 2, 64), (3, 3, 80)])
def test_store_kv_matches_reference(dtype: torch.dtype, page_size: int, h_kv: int, d: int) -> None:
    g = torch.Generator().manual_seed(0)
    shape = (6, page_size, h_kv, d)
    k_cache, v_cache = torch.zeros(shape, dtype=dtype), torch.zeros(shape, dtype=dtype)
    slots = torch.randperm(6 * page_size, generator=g)[:11]
    k, v = torch.randn(11, h_kv, d, generator=g), torch.randn(11, h_kv, d, generator=g)
    want_k, want_v = k_cache.clone(), v_cache.clone()
    store_kv_reference(want_k, want_v, k, v, slots)
    store_kv(k_cache, v_cache, k, v, slots)
    assert torch.equal(k_cache, want_k) and torch.equal(v_cache, want_v)


def test_store_kv_rejects_bad_shapes() -> None:
    cache = torch.zeros(2, 4, 2, 8)
    with pytest.raises(ValueError, match="expected k, v"):
        store_kv(cache, cache.clone(), torch.zeros(3, 2, 8), torch.zeros(3, 2, 8), torch.arange(2))
    with pytest.raises(ValueError, match="int64"):
        store_kv(cache, cache.clone(), torch.zeros(2, 2, 8), torch.zeros(2, 2, 8), torch.zeros(2))


def _dfs_order(parents: list[int]) -> list[int]:
    children: list[list[int]] = [[] for _ in parents]
    for i, p in enumerate(parents):
        if p >= 0:
            children[p].append(i)
    order: list[int] = []
    stack = [i for i in reversed(range(len(parents))) if parents[i] < 0]
    while stack:
        node = stack.pop()
        order.append(node)
        stack.extend(reversed(children[node]))
    return order


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 10**6), min_size=1, max_size=40), st.integers(0, 2**16))
def test_preorder_path_sums_and_subtrees_match_a_walk(draws: list[int], seed: int) -> None:
    rng = np.random.default_rng(seed)
    parents = [-1] + [int(x % (i + 1)) - (1 if rng.random() < 0.1 else 0) for i, x in enumerate(draws[1:])]
    parents = [min(p, i - 1) if i else -1 for i, p in enumerate(parents)]
    par = np.array(parents)
    values = rng.integers(0, 50, len(par))
    order = _dfs_order(parents)
    pre, size = preorder(par)
    assert [int(x) for x in np.argsort(pre)] == order
    for way in (_preorder_by_walk, _preorder_by_jumping):  # small trees walk, large ones jump
        assert all(np.array_equal(a, b) for a, b in zip(way(par), (pre, size)))
    for i in range(len(par)):
        subtree = order[pre[i] : pre[i] + size[i]]
        node, path_total = i, 0
        while node >= 0:
            path_total += values[node]
            node = parents[node]
        assert path_sums(par, values)[i] == path_total
        assert all(i in _ancestors(parents, j) for j in subtree)
        assert size[i] == sum(i in _ancestors(parents, j) for j in range(len(par)))


@pytest.mark.parametrize("parents", [[-1], [-1, 0], [-1, 0, 0, 0], [-1, 0, 0, 1], [-1, -1, 0], [-1, 0, -1, 2]])
def test_preorder_of_stars_and_near_stars_matches_a_walk(parents: list[int]) -> None:
    # Stars take a shorter way than other trees; both must give the walk's order and sizes.
    pre, size = preorder(np.array(parents))
    order = _dfs_order(parents)
    assert [int(x) for x in np.argsort(pre)] == order
    assert size.tolist() == [sum(i in _ancestors(parents, j) for j in range(len(parents))) for i in range(len(parents))]


@pytest.mark.parametrize("span", [3, 40, 2000])
def test_preorder_of_a_tree_too_large_to_walk_matches_a_walk(span: int) -> None:
    # Past WALK_NODES nodes the preorder takes pointer jumping; deep (span 3) and shallow trees.
    rng = np.random.default_rng(span)
    n = 3 * WALK_NODES
    parents = [-1] + [int(rng.integers(max(0, i - span), i)) for i in range(1, n)]
    pre, size = preorder(np.array(parents))
    assert [int(x) for x in np.argsort(pre)] == _dfs_order(parents)
    assert all(np.array_equal(a, b) for a, b in zip(_preorder_by_walk(np.array(parents)), (pre, size)))


def _ancestors(parents: list[int], node: int) -> set[int]:
    out = set()
    while node >= 0:
        out.add(node)
        node = parents[node]
    return out


@settings(max_examples=80, deadline=None)
@given(st.lists(st.integers(0, 10**6), min_size=1, max_size=30), st.integers(0, 2**16),
       st.sampled_from(["some", "leaves", "all"]))
def test_path_slots_of_chosen_nodes_match_a_walk(draws: list[int], seed: int, choice: str) -> None:
    # Each query's slots of the chosen nodes on its path, root first, its own node cut at what it
    # sees; chosen nodes that are all leaves take a shorter way, and all nodes (None) are what the
    # reference attends to: each checked against a walk up the parents. Forests, empty nodes and
    # queries that see none of their own node are among the cases.
    rng = np.random.default_rng(seed)
    parents = [-1] + [int(x % (i + 2)) - 1 for i, x in enumerate(draws[1:])]
    lengths = rng.integers(0, 5, len(parents))
    lengths[[i for i, p in enumerate(parents) if p < 0]] += 1  # a root holds a token: every path sees one
    slots = np.split(rng.permutation(int(lengths.sum())), np.cumsum(lengths)[:-1])
    queries = rng.integers(0, len(parents), int(rng.integers(1, 8)))
    visible = np.array([rng.integers(1 if parents[q] < 0 else 0, lengths[q] + 1) for q in queries])
    has_child = np.zeros(len(parents), dtype=bool)
    has_child[[p for p in parents if p >= 0]] = True
    chosen = {"some": rng.random(len(parents)) < 0.5, "leaves": (rng.random(len(parents)) < 0.5) & ~has_child,
              "all": None}[choice]
    plan = plan_tree_attention(np.array(parents), slots, queries, visible, page_size=4, device="cpu")
    offsets, flat = plan.path_slots(chosen)
    ids, valid = plan.padded_query_slots
    for q, (node, seen) in enumerate(zip(queries, visible)):
        path = sorted(_ancestors(parents, int(node)), key=lambda a: len(_ancestors(parents, a)))
        want = [int(s) for a in path if chosen is None or chosen[a]
                for s in (slots[a][:seen] if a == node else slots[a])]
        assert flat[offsets[q] : offsets[q + 1]].tolist() == want
        if chosen is None:
            assert plan.visible_slots(q).tolist() == want and ids[q][valid[q]].tolist() == want


def test_concat_ranges() -> None:
    assert concat_ranges(np.array([5, 0, 10]), np.array([2, 0, 3])).tolist() == [5, 6, 10, 11, 12]
    assert concat_ranges(np.array([], dtype=np.int64), np.array([], dtype=np.int64)).tolist() == []


def test_plan_accepts_arrays_and_tensors_and_views_follow_the_paths() -> None:
    parents = np.array([-1, 0, 0, 1])
    slots = [np.arange(0, 5), torch.arange(5, 8), [8, 9], np.arange(10, 14)]
    plan = plan_tree_attention(parents, slots, torch.tensor([3, 2, 1]), [2, 2, 1], page_size=4, device="cpu")
    assert plan.visible_slots(0).tolist() == [0, 1, 2, 3, 4, 5, 6, 7, 10, 11]
    assert plan.visible_slots(1).tolist() == [0, 1, 2, 3, 4, 8, 9]
    assert plan.visible_slots(2).tolist() == [0, 1, 2, 3, 4, 5]
    with pytest.raises(ValueError, match="integers"):
        plan_tree_attention([-1], [np.array([0.5])], [0], page_size=4, device="cpu")


def test_uploaded_metadata_views_start_16_byte_aligned() -> None:
    # Triton compiles a kernel variant per pointer alignment: every view must start aligned,
    # whatever the sizes before it, and keep its values.
    arrays = [np.arange(n, dtype=np.int64) * 3 - 1 for n in (5, 1, 0, 7, 4, 9)]
    views = upload_int32(arrays, torch.device("cpu"))
    for a, v in zip(arrays, views):
        assert v.data_ptr() % 16 == 0
        assert v.tolist() == a.tolist()
    assert upload_int32([np.array([2**31 - 1, -(2**31)])], torch.device("cpu"))[0].tolist() == [2**31 - 1, -(2**31)]
    flat = views[0].as_strided((aligned_starts([a.size for a in arrays])[-1],), (1,), 0)
    assert flat.tolist() == [x for a in arrays for x in (*a.tolist(), *[0] * (-a.size % 4))]  # zero padding


def _class_items(parents: list[int], lengths: list[int], queries: list[int], cfg: WorkConfig) -> dict[int, tuple[int, int]]:
    """{tile rows: (programs, longest chunk)} of a plan with 32 query and 8 KV heads of 128."""
    slots = np.split(np.arange(sum(lengths)), np.cumsum(lengths)[:-1])
    plan = plan_tree_attention(np.array(parents), slots, np.array(queries), page_size=16, device="cpu")
    host = tree_host_work(plan, 32, 8, 128, cfg)
    out = {}
    for c, shape in enumerate(host.shapes):
        chunk = host.items[host.item_class == c, 1]
        if len(chunk):
            out[shape.block_m] = (8 * len(chunk), int(chunk.max()))
    return out


def test_work_sizing_fills_the_last_round_of_each_launch() -> None:
    # A 20k prompt under 256 one-token leaves, on 132 SMs: 1024 query rows in 128-row tiles,
    # one resident program per SM. Two programs per SM over the whole tree made 320 items: three
    # rounds, the last part-empty. Sized per launch, the items fill one round (or two).
    star = ([-1] + [0] * 256, [20480] + [1] * 256, list(range(1, 257)))
    assert _class_items(*star, WorkConfig(waves=2.0, num_sms=132)) == {128: (320, 4096)}
    programs, chunk = _class_items(*star, WorkConfig(num_sms=132))[128]
    assert 0.9 * 132 <= programs <= 132 and programs * chunk >= 64 * 20480
    programs, chunk = _class_items(*star, WorkConfig(num_sms=132, rounds=(2, 4)))[128]
    assert 132 < programs <= 264 and -(-programs // 132) * chunk < 3 * 4096
    # A launch that cannot fill one round joins the next narrower one: a 1.1k prompt's 40 query
    # rows would be 40 64-row programs at most; in 16-row tiles, beside the ten 1000-key leaves,
    # all fit one launch, sized to half a round of the 660 programs (five per SM) it may have:
    # memory-bound either way, and half the partials.
    star = ([-1] + [0] * 10, [1100] + [1000] * 10, list(range(1, 11)))
    assert set(_class_items(*star, WorkConfig(waves=2.0, num_sms=132))) == {16, 64}
    classes = _class_items(*star, WorkConfig(num_sms=132))
    assert set(classes) == {16} and 0.8 * 330 <= classes[16][0] <= 330
    # Not when the narrower tiles would read the node many times over: a 4k prompt under 50
    # leaves is 2 blocks of 128 rows (at most 128 programs) but 13 blocks of 16.
    star = ([-1] + [0] * 50, [4096] + [200] * 50, list(range(1, 51)))
    assert set(_class_items(*star, WorkConfig(num_sms=132, wide_tiles=(128, 4096)))) == {16, 128}


def test_work_sizing_gives_a_two_per_sm_class_one_program_per_sm_when_that_ends_first() -> None:
    # 16 decode queries under a 16k prompt: 64 rows, two programs per SM. Their multiply is
    # light, so one program per SM keeps up with the memory and leaves the merge half the
    # partials: 128 programs of 1024 keys, not 256 of 512.
    star = ([-1] + [0] * 16, [16384] + [1] * 16, list(range(1, 17)))
    assert _class_items(*star, WorkConfig(num_sms=132)) == {64: (128, 1024)}
    # Under a 2k prompt the chunks are already at their fewest keys (four times the rows).
    star = ([-1] + [0] * 8, [2048] + [1] * 8, list(range(1, 9)))
    assert _class_items(*star, WorkConfig(num_sms=132)) == {64: (64, 256)}
    # A 128-row class holds one program per SM: half a round would leave SMs idle.
    star = ([-1] + [0] * 64, [16384] + [1] * 64, list(range(1, 65)))
    assert _class_items(*star, WorkConfig(num_sms=132)) == {128: (128, 2048)}


def test_work_sizing_keeps_memory_bound_launches_in_one_round() -> None:
    # 50 leaves of 400 keys, one query each: 400 16-row programs already stream K and V at the
    # memory's rate, so cutting them into more, shorter items (two rounds) would only add partials.
    star = ([-1] + [0] * 50, [20480] + [400] * 50, list(range(1, 51)))
    assert _class_items(*star, WorkConfig(num_sms=132))[16] == (400, 400)


def test_a_wide_launch_leaves_sms_to_the_launches_beside_it() -> None:
    # A 20k prompt's 50 query rows (two 128-row blocks, one program per SM) beside 50 leaves of
    # 400 keys (400 16-row programs). Sized for all 132 SMs the prompt makes 16 items per KV head
    # (128 programs) and leaves 4 SMs free; its share of the SMs by SM-time is 118, so 14 items
    # (112 programs). 32 leaves of 256 keys under a 32k prompt are too little work to move it.
    star = ([-1] + [0] * 50, [20480] + [400] * 50, list(range(1, 51)))
    assert _class_items(*star, WorkConfig(num_sms=132, wide_sms=0)) == {128: (128, 2560), 16: (400, 400)}
    assert _class_items(*star, WorkConfig(num_sms=132)) == {128: (112, 2944), 16: (400, 400)}
    assert _class_items(*star, WorkConfig(num_sms=132, wide_sms=80))[128] == (80, 4096)  # forced
    star = ([-1] + [0] * 32, [32768] + [256] * 32, list(range(1, 33)))
    assert _class_items(*star, WorkConfig(num_sms=132))[128] == (128, 2048)
    # No split where the leaves' launch does not fit the GPU at once (100 leaves: 800 programs),
    # where the leaves' SM-time is more than half the prompt's (64 leaves of 1000 keys under an
    # 8k prompt), or where there is no other launch.
    for leaves, keys, prompt in ((100, 400, 20480), (64, 1000, 8192)):
        star = ([-1] + [0] * leaves, [prompt] + [keys] * leaves, list(range(1, leaves + 1)))
        assert _class_items(*star, WorkConfig(num_sms=132)) == _class_items(*star, WorkConfig(num_sms=132, wide_sms=0))
    star = ([-1] + [0] * 64, [16384] + [1] * 64, list(range(1, 65)))
    assert _class_items(*star, WorkConfig(num_sms=132, wide_sms=80)) == {128: (128, 2048)}
    with pytest.raises(ValueError, match="wide_sms"):
        WorkConfig(wide_sms=-1)


def _launch_rows(parents: list[int], lengths: list[int], queries: list[int], cfg: WorkConfig) -> list[int]:
    """Tile rows of each partial launch, in launch order, of a plan with 32 query and 8 KV heads."""
    slots = np.split(np.arange(sum(lengths)), np.cumsum(lengths)[:-1])
    plan = plan_tree_attention(np.array(parents), slots, np.array(queries), page_size=16, device="cpu")
    host = tree_host_work(plan, 32, 8, 128, cfg)
    work = tree_work(plan, 32, 8, 128, cfg)
    assert sorted(host.launch_order) == list(range(len(host.shapes)))
    for c in work.classes:  # each launch holds exactly the items of its class
        assert (host.item_class[c.first_item : c.first_item + c.num_items] == host.shapes.index(c.tile)).all()
    return [c.tile.block_m for c in work.classes]


def test_the_longest_launch_goes_first() -> None:
    # Two tile classes of one call run side by side; the one the model expects to take longest
    # starts first, so the other's programs fill the SMs it leaves. A 32k prompt's 128-row launch
    # outlasts its 32 leaves' 16-row launch several times over; 64 leaves of 400 keys under an
    # 8k prompt take longer than the prompt (memory-bound launches counted 1.8 times the model).
    cfg = WorkConfig(num_sms=132)
    assert _launch_rows([-1] + [0] * 32, [32768] + [256] * 32, list(range(1, 33)), cfg) == [128, 16]
    assert _launch_rows([-1] + [0] * 64, [8192] + [400] * 64, list(range(1, 65)), cfg) == [16, 128]
    # A wide launch sized to leave SMs to the others goes first, even where it is the shorter.
    assert _launch_rows([-1] + [0] * 50, [4096] + [200] * 50, list(range(1, 51)), cfg) == [128, 16]
    assert _launch_rows([-1] + [0] * 50, [4096] + [200] * 50, list(range(1, 51)), WorkConfig(num_sms=132, wide_sms=0)) == [16, 128]
    # More programs than the GPU holds at once go last whatever their length: 100 leaves of 400
    # keys under an 8k prompt are 800 16-row programs, more than 132 SMs hold (5 each); so are
    # 100 leaves of 1000 keys. 64 leaves (512 programs) keep the longest-first order (above).
    assert _launch_rows([-1] + [0] * 100, [8192] + [400] * 100, list(range(1, 101)), cfg) == [128, 16]
    assert _launch_rows([-1] + [0] * 100, [8192] + [1000] * 100, list(range(1, 101)), cfg) == [128, 16]
    # Sized by waves there is no launch model: classes go narrowest first.
    assert _launch_rows([-1] + [0] * 32, [32768] + [256] * 32, list(range(1, 33)), WorkConfig(num_sms=132, waves=2.0)) == [16, 128]


def test_programs_per_sm_follow_shared_memory_and_registers() -> None:
    shapes = tile_shapes(4, 128)
    # On a Hopper SM: five 16-row programs fit an SM, two 64-row ones (by shared memory and by
    # registers), one 128-row one.
    assert [programs_per_sm(s, 128, *SM_LIMITS) for s in shapes] == [5, 2, 1]
    assert [programs_per_sm(s, 128, 100 * 1024, SM_LIMITS[1]) for s in shapes] == [2, 1, 1]  # never fewer than one
    assert programs_per_sm(TileConfig(16, 32, 4, 2), 128, *SM_LIMITS) == 4  # estimated: 36 KiB, 116 registers a thread
    assert programs_per_sm(TileConfig(64, 128, 4, 4), 128, *SM_LIMITS) == 1  # more shared memory than an SM has


def test_work_config_rejects_bad_rounds() -> None:
    for rounds in ((), (2, 1), (0, 1), (1, 1)):
        with pytest.raises(ValueError, match="rounds"):
            WorkConfig(rounds=rounds)
    with pytest.raises(ValueError, match="fold_tail"):
        WorkConfig(fold_tail=-1)


def _children_plan(prompt: int, children: int, keys: int, queries: int, mid: int = 0):
    """A prompt, ``children`` nodes of ``keys`` tokens under it (under one ``mid``-token node each
    when mid > 0), and ``queries`` queries on each child's last token."""
    parents, lengths = [-1], [prompt]
    for _ in range(children):
        if mid:
            parents.append(0)
            lengths.append(mid)
        parents.append(len(parents) - 1 if mid else 0)
        lengths.append(keys)
    bounds = np.cumsum([0, *lengths])
    leaves = [i for i in range(1, len(parents)) if i not in parents]
    return plan_tree_attention(np.array(parents), [np.arange(a, b) for a, b in zip(bounds, bounds[1:])],
                               np.repeat(leaves, queries), page_size=16, device="cpu")


def test_a_launch_of_short_shared_nodes_is_read_by_the_merges() -> None:
    # A 2k prompt's 8 children of 128 keys, 4 queries each: the children's 16-row launch beside
    # the prompt's is folded into the merges, each query reading its child's 128 keys itself.
    plan = _children_plan(2048, 8, 128, 4)
    host = tree_host_work(plan, 32, 8, 128, WorkConfig(num_sms=132))
    assert set(host.items[:, 3]) == {0} and (host.own_len[0] == 128).all()
    host = tree_host_work(plan, 32, 8, 128, WorkConfig(num_sms=132, fold_launches=False))
    assert set(host.items[:, 3]) == set(range(9)) and not host.own_len.any()
    # Not where a child is longer than fold_own, or its queries' own keys would exceed it (a
    # 64-key child under a 100-key middle node, unchained: chained, the pair is one 164-key node,
    # named by the child), the folded reads (16 x 128 keys x 4 queries) would outgrow the
    # prompt's (1024 keys x 4 blocks), or the prompt's launch takes an SM per program (a 4k
    # prompt's 64 queries in 128-row tiles: the children's programs run beside).
    mids = _children_plan(8192, 4, 64, 4, mid=100)
    for plan, cfg, nodes in ((_children_plan(2048, 8, 128, 4), WorkConfig(num_sms=132, fold_own=100), range(9)),
                             (mids, WorkConfig(num_sms=132, chains=False), range(9)),
                             (mids, WorkConfig(num_sms=132), range(0, 9, 2)),
                             (_children_plan(1024, 16, 128, 4), WorkConfig(num_sms=132), range(17)),
                             (_children_plan(4096, 16, 64, 4), WorkConfig(num_sms=132), range(17))):
        host = tree_host_work(plan, 32, 8, 128, cfg)
        assert set(host.items[:, 3]) == set(nodes) and not host.own_len.any()
    # Nor where a child's own queries see a causal prefix of it (a prefill), measured on decode only.
    plan = _children_plan(2048, 8, 128, 4)
    visible = np.full(plan.num_queries, 128)
    visible[0] = 5
    plan = plan_tree_attention(plan.parents, [plan.slots[a:b] for a, b in zip(plan.node_offsets, plan.node_offsets[1:])],
                               plan.query_nodes, visible, page_size=16, device="cpu")
    assert set(tree_host_work(plan, 32, 8, 128, WorkConfig(num_sms=132)).items[:, 3]) == set(range(9))


@pytest.mark.parametrize("tail_cap,fold_tail,folded", [(512, 512, True), (513, 512, False), (64, 0, False), (200, 128, False)])
def test_decode_tails_are_read_by_the_merge_up_to_fold_tail(tail_cap: int, fold_tail: int, folded: bool) -> None:
    # 16 branches of a 2k prompt whose tails may grow to tail_cap tokens, half grown so far.
    plan = plan_tree_attention(np.array([-1] + [0] * 16), [np.arange(2048)] + [2048 + np.arange(i, i + 1) for i in range(16)],
                               np.arange(1, 17), page_size=16, device="cpu")
    tails = [10_000 + tail_cap * i + np.arange(tail_cap // 2) for i in range(16)]
    work = decode_work(plan, tails, tail_cap, 32, 8, 128, WorkConfig(num_sms=132, fold_tail=fold_tail))
    assert work.folded == folded
    if folded:  # the merge's own range 1 is each tail's window; no partial item reads a tail
        assert len(work.tail_items) == 0 and (work.host.own_len[1] == tail_cap // 2).all()
        assert (work.host.own_start[1] == work.tail_base).all()
    else:  # tail items of at most TAIL_PIECE keys each, none read by the merge
        assert len(work.tail_items) == 16 * -(-tail_cap // TAIL_PIECE) and not work.host.own_len[1].any()
        assert (work.host.items[work.tail_items, 1] <= TAIL_PIECE).all()


def test_a_node_only_one_query_sees_is_read_by_its_merge() -> None:
    # 256 leaves of 32 keys under a 4k prompt, one query each: each leaf is its query's own keys
    # (read by the merge), so only the prompt has partial items; leaves past fold_own keep theirs.
    slots = [np.arange(4096)] + [4096 + 32 * i + np.arange(32) for i in range(256)]
    plan = plan_tree_attention(np.array([-1] + [0] * 256), slots, np.arange(1, 257), page_size=16, device="cpu")
    host = tree_host_work(plan, 32, 8, 128, WorkConfig(num_sms=132))
    assert set(host.items[:, 3]) == {0} and (host.own_len[0] == 32).all()
    host = tree_host_work(plan, 32, 8, 128, WorkConfig(num_sms=132, fold_unshared=False))
    assert set(host.items[:, 3]) == set(range(257)) and not host.own_len.any()
    long = [np.arange(4096)] + [4096 + 200 * i + np.arange(200) for i in range(50)]
    plan = plan_tree_attention(np.array([-1] + [0] * 50), long, np.arange(1, 51), page_size=16, device="cpu")
    assert set(tree_host_work(plan, 32, 8, 128, WorkConfig(num_sms=132)).items[:, 3]) == set(range(51))


@pytest.mark.parametrize("leaf,block", [(1, 16), (16, 16), (17, 32), (100, 32)])
def test_the_merge_reads_own_keys_in_the_smallest_block_that_holds_every_range(leaf: int, block: int) -> None:
    # Leaves of `leaf` keys, one query each, are their queries' own keys (read by the merge).
    slots = [np.arange(512)] + [512 + leaf * i + np.arange(leaf) for i in range(6)]
    plan = plan_tree_attention(np.array([-1] + [0] * 6), slots, np.arange(1, 7), page_size=16, device="cpu")
    work = tree_work(plan, 8, 2, 32, WorkConfig(num_sms=4))
    assert work.own_len is not None and int(work.own_len.max()) == leaf
    assert work.own_block == block and block in OWN_BLOCKS
    for forced in OWN_BLOCKS:  # a config may fix it (the benchmark's sweep compares both)
        assert tree_work(plan, 8, 2, 32, WorkConfig(num_sms=4, own_block=forced)).own_block == forced
    with pytest.raises(ValueError, match="own_block"):
        WorkConfig(own_block=24)


@settings(max_examples=80, deadline=None)
@given(st.lists(st.integers(0, 10**6), min_size=1, max_size=12), st.integers(0, 2**16), st.sampled_from([1, 4]))
def test_an_item_holds_exactly_the_keys_its_queries_see(draws: list[int], seed: int, group: int) -> None:
    # The kernels size their loops by an item's length, not by its queries: it must be the most
    # keys any of them sees in the chunk (its queries below the node see the whole chunk, the
    # node's own queries a causal prefix), so no visible key is left out and none unseen is read.
    rng = np.random.default_rng(seed)
    parents = [-1] + [int(x % (i + 1)) for i, x in enumerate(draws[1:])]
    lengths = rng.choice([1, 3, 17, 40, 90], len(parents))
    slots = np.split(rng.permutation(int(lengths.sum())), np.cumsum(lengths)[:-1])
    queries = rng.integers(0, len(parents), int(rng.integers(1, 40)))
    visible = rng.integers(1, lengths[queries] + 1)
    plan = plan_tree_attention(np.array(parents), slots, queries, visible, page_size=4, device="cpu")
    cfg = WorkConfig(waves=4.0, num_sms=32, min_chunk=16, wide_tiles=(0, 0), small_node=0, fold_unshared=False)
    host = tree_host_work(plan, 8 * group, 8, 64, cfg)
    starts = {}
    for _, _, t0, node, *_ in host.items.tolist():
        starts.setdefault(node, set()).add(t0)
    for _, length, t0, node, q_start, q_count, _ in host.items.tolist():
        later = [t for t in starts[node] if t > t0]
        chunk = (min(later) if later else int(lengths[node])) - t0
        seen = [
            min(int(host.q_vis[r]) - t0, chunk) if host.q_node[r] == node else chunk
            for r in range(q_start, q_start + q_count)
        ]
        assert length == max(seen) and min(seen) >= 1


def _path_plan(cuts: list[int], total: int = 4096, queries: int = 32):
    """A path of ``total`` keys cut at ``cuts`` into nodes, ``queries`` queries on its last token."""
    bounds = [0, *cuts, total]
    return plan_tree_attention(list(range(-1, len(bounds) - 2)), [np.arange(a, b) for a, b in zip(bounds, bounds[1:])],
                               [len(bounds) - 2] * queries, page_size=16, device="cpu")


@pytest.mark.parametrize("cuts", [[64], [2000], [1000, 2000, 3000], [2000, 2003], [5], [4093], [1, 2, 3, 3000]])
def test_a_path_cut_into_nodes_is_chunked_as_one_node(cuts: list[int]) -> None:
    # 32 queries below a 4096-key path, whole or cut into nodes (a search expanding a node at
    # depth d), some shorter than small_node: the same chunks of slots and queries, each named
    # by the path's deepest node with its start in that node's keys (negative: above it), and
    # no keys left to the merges. Unchained, each node alone, the short ones read by the merges.
    cfg = WorkConfig(num_sms=132, wide_tiles=(129, 4096))
    whole = tree_host_work(_path_plan([]), 32, 8, 128, cfg).items
    plan = _path_plan(cuts)
    items = tree_host_work(plan, 32, 8, 128, cfg).items
    same = [0, 1, 4, 5, 6]  # first slot, keys, queries, partial rows
    np.testing.assert_array_equal(items[:, same], whole[:, same])
    assert (items[:, 3] == plan.num_nodes - 1).all()
    np.testing.assert_array_equal(items[:, 2], whole[:, 2] - cuts[-1])
    assert not tree_host_work(plan, 32, 8, 128, cfg).own_len.any()
    alone = tree_host_work(plan, 32, 8, 128, replace(cfg, chains=False))
    assert set(alone.items[:, 3]) == set((plan.node_lengths >= cfg.small_node).nonzero()[0])
    assert (alone.own_len[0] == (plan.node_lengths * (plan.node_lengths < cfg.small_node)).sum()).all()


def test_a_chain_ends_where_slots_are_not_stored_in_order_or_queries_differ() -> None:
    # Root (0) -> 1 -> 3 -> 4 with queries on 4 and one on 3; node 2, a child of the root with no
    # queries, is stored between 1 and 3. Chained: 0 and 1 (stored in order, the same queries);
    # not 1 and 3 (slots apart), nor 3 and 4 (3 has a query of its own).
    lengths = [300, 200, 50, 400, 500]
    bounds = np.cumsum([0, *lengths])
    plan = plan_tree_attention([-1, 0, 0, 1, 3], [np.arange(a, b) for a, b in zip(bounds, bounds[1:])],
                               [4] * 8 + [3], page_size=16, device="cpu")
    items = tree_host_work(plan, 32, 8, 128, WorkConfig(num_sms=132)).items
    assert set(items[:, 3]) == {1, 3, 4}
    chain = items[items[:, 3] == 1]
    assert chain[:, 0].min() == 0 and (chain[:, 0] + chain[:, 1]).max() == 500 and chain[:, 2].min() == -300
