"""Write the bundled Game of 24 model's training examples to JSON Lines, with counts.

    PYTHONPATH=. python training/game24/make_data.py --out game24_train.jsonl --seed 0

``train.py`` calls the same generator (:func:`thoughttree.tasks.game24.dataset.generate_examples`)
itself; this script is for looking at the data. Each line is
``{"kind": ..., "prompt": ..., "completion": ...}``. The validation and test puzzles
(:data:`thoughttree.tasks.game24.split.VALIDATION`, :data:`~thoughttree.tasks.game24.split.TEST`)
and every state of four or three numbers reachable from them are held out. The file's SHA-256
is printed; it is the ``data_sha256`` that ``train.py`` records in the model's ``training.json``.
"""

from __future__ import annotations

import argparse
import hashlib
from collections import Counter
from pathlib import Path

from thoughttree.tasks.game24.dataset import DataConfig, example_line, generate_examples
from thoughttree.tasks.game24.split import RANGES


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help="JSON Lines file to write")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    examples = generate_examples(DataConfig(seed=args.seed))
    text = "".join(example_line(e) + "\n" for e in examples).encode()
    args.out.write_bytes(text)
    kinds = Counter(e.kind for e in examples)
    labels = Counter(e.completion.strip() for e in examples if e.kind == "value")
    held_out = "; ".join(f"{r.name} {r.label}" for r in RANGES.values())
    print(f"wrote {len(examples)} examples to {args.out}: {dict(kinds)}; value labels {dict(labels)}")
    print(f"held out: {held_out}")
    print(f"sha256: {hashlib.sha256(text).hexdigest()}")


if __name__ == "__main__":
    main()
