"""Write the bundled Game of 24 model's training examples to JSON Lines, with counts.

    PYTHONPATH=. python training/game24/make_data.py --out game24_train.jsonl --seed 0

``train.py`` calls the same generator (:func:`thoughttree.tasks.game24.dataset.generate_examples`)
itself; this script is for looking at the data. Each line is
``{"kind": ..., "prompt": ..., "completion": ...}``.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

from thoughttree.tasks.game24.dataset import DataConfig, generate_examples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help="JSON Lines file to write")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    examples = generate_examples(DataConfig(seed=args.seed))
    with args.out.open("w") as f:
        for e in examples:
            f.write(json.dumps({"kind": e.kind, "prompt": e.prompt, "completion": e.completion}) + "\n")
    kinds = Counter(e.kind for e in examples)
    labels = Counter(e.completion.strip() for e in examples if e.kind == "value")
    print(f"wrote {len(examples)} examples to {args.out}: {dict(kinds)}; value labels {dict(labels)}")


if __name__ == "__main__":
    main()
