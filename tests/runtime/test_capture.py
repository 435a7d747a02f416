"""Graph captures on the decode buffers: a failed capture falls back to eager steps, and every
graph of an engine writes its logits into one shared buffer.

On the CPU an emulation stands in for CUDA graphs: a replay runs the recorded step again, so its
output is only right when the step writes it into a buffer that outlives the capture, as a CUDA
graph's replay rewrites the very tensors it captured.
"""

from __future__ import annotations

import warnings
from typing import Callable

import pytest
import torch

from tiny_models import make_model, prefill_on_pytorch
from thoughttree import LM, RuntimeConfig, Sampling, ThoughtTree
from thoughttree.runtime.capture import CudaGraphs, GraphCapture

CUDA = torch.cuda.is_available()
DEV = "cuda" if CUDA else "cpu"
DTYPE = "bfloat16" if CUDA else "float16"


class _Replay:
    def __init__(self, forward: Callable[[], torch.Tensor]) -> None:
        self.forward, self.fresh = forward, True

    def replay(self) -> None:
        if self.fresh:  # the capture ran the step once already, as a capture and its first replay do
            self.fresh = False
            return
        self.forward()


class EmulatedGraphs:
    """A stand-in for CUDA graphs on any device: a replay runs the captured step again."""

    def __init__(self) -> None:
        self.captures = 0

    def pool(self) -> object:
        return None

    def warm_up(self, forward: Callable[[], object]) -> None:
        forward()

    def capture(self, forward: Callable[[], torch.Tensor], pool: object) -> tuple[_Replay, torch.Tensor, int]:
        self.captures += 1
        return _Replay(forward), forward(), 0


class FailingGraphs(EmulatedGraphs):
    """Captures that raise, as an operation a CUDA graph cannot hold would."""

    def capture(self, forward: Callable[[], torch.Tensor], pool: object) -> tuple[_Replay, torch.Tensor, int]:
        self.captures += 1
        raise RuntimeError("operation not permitted when stream is capturing")


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return make_model(tmp_path_factory.mktemp("capture"), "llama", num_hidden_layers=1)


def _lm(path, capture: GraphCapture | None) -> LM:
    rc = RuntimeConfig(page_size=4, num_pages=512, attention="deft")
    lm = LM.from_pretrained(path, device=DEV, dtype=DTYPE, runtime=rc)
    lm.model.fused = True  # the fast decode path (Triton interpreter on the CPU)
    lm.engine.graph_capture = capture  # None: eager steps
    return lm


def _search(lm: LM) -> tuple[list[list[int]], list[list[int]], torch.Tensor]:
    """Children of a prompt, grandchildren under both (another row bucket), and scores of
    sequences sharing a prefix (general forwards on the decode buffers)."""
    tree = ThoughtTree(lm, prompt=list(range(3, 9)), seed=0)
    kids = tree.expand([tree.root], n=2, sampling=Sampling(max_tokens=2, temperature=1.0, ignore_eos=True))[0]
    more = tree.expand(kids, n=2, sampling=Sampling(max_tokens=2, temperature=0.7, ignore_eos=True))
    lm.check_integrity(tree)
    scores = lm.tree_logits([[1, 5, 6, 7, 8], [1, 5, 6, 9]])
    return [k.tokens for k in kids], [k.tokens for ks in more for k in ks], torch.stack([s[-1] for s in scores])


@pytest.fixture(scope="module")
def graphed(model_dir) -> tuple[LM, tuple[list[list[int]], list[list[int]], torch.Tensor]]:
    """An LM whose steps replay (emulated) graphs, after one search."""
    lm = _lm(model_dir, EmulatedGraphs())
    return lm, _search(lm)


def test_a_failed_capture_falls_back_to_eager_steps_with_one_warning(model_dir, graphed) -> None:
    lm, want = graphed
    assert lm.stats.graph_replays > 0 and lm.stats.graph_failures == 0
    failing = FailingGraphs()
    broken = _lm(model_dir, failing)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = _search(broken)
    assert len(caught) == 1 and caught[0].category is RuntimeWarning
    assert str(caught[0].message).startswith("capturing a CUDA graph of a general forward (bucket (8, 1)) failed")
    assert broken.stats.graph_replays == 0 and broken.stats.graphs == 0
    # Each bucket is tried once: the prompt's prefill, the decode steps of 2 and of 4 rows, the scores.
    assert broken.stats.graph_failures == failing.captures == 4
    assert got[0] == want[0] and got[1] == want[1] and torch.equal(got[2], want[2])
    broken.tree_logits([[1, 5, 6, 7, 8], [1, 5, 6, 9]])
    assert failing.captures == 4  # a failed bucket stays eager


def test_every_graph_writes_its_logits_into_the_engine_s_one_buffer(model_dir, graphed) -> None:
    lm, got = graphed
    arena = lm.engine.arena
    buffer = lm.engine.logits_buffer()
    assert arena.logits is buffer and buffer.shape == (512, lm.model.cfg.vocab_size) and buffer.dtype == lm.model.dtype
    outs = [out for _, out in [*arena.graphs.values(), *arena.row_graphs.values()]]
    assert len(outs) >= 2 and all(out.data_ptr() == buffer.data_ptr() for out in outs)
    # The buffer is counted once among the bytes the graphs and their buffers hold.
    assert lm.stats.graph_bytes >= buffer.numel() * buffer.element_size()
    # More KV than the buffers hold, stored on the PyTorch layers; the two rows after it need larger buffers.
    prefix = ThoughtTree(lm, prompt=[1] + list(range(3, 100)))
    prefill_on_pytorch(lm, prefix)
    lm.tree_logits([[1] + list(range(3, 100)) + [i] for i in (3, 4)])
    assert lm.engine.arena is not arena and lm.engine.arena.logits is buffer
    own = _lm(model_dir, EmulatedGraphs())
    own.engine.logits_buffer = lambda: None  # type: ignore[method-assign]  # every step its own logits
    want = _search(own)
    assert own.engine.arena.logits is None
    assert got[0] == want[0] and got[1] == want[1] and torch.equal(got[2], want[2])


@pytest.mark.gpu
def test_a_capture_failing_inside_a_cuda_graph_falls_back(model_dir) -> None:
    class Broken(CudaGraphs):
        def capture(self, forward, pool):
            def fail() -> torch.Tensor:
                forward()
                raise RuntimeError("an operation the graph cannot hold")

            return super().capture(fail, pool)

    want = _search(_lm(model_dir, None))
    lm = _lm(model_dir, Broken())
    with pytest.warns(RuntimeWarning, match="runs eagerly from now on"):
        got = _search(lm)
    assert lm.stats.graph_failures > 0 and lm.stats.graph_replays == 0
    assert got[0] == want[0] and got[1] == want[1] and torch.equal(got[2], want[2])
