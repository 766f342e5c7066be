"""How well the trap filter tells session ids in paths from words.

Run: ``python -m bench.pathids [--corpus DIR] [--names DIR ...] [--n 3000]``.
Prints, for random ids of several shapes and lengths, the share
:func:`extensions.spidermiddlewares.traps.is_token` misses (a missed id is a path of its
own:
admitted without the variant budget), and for real path segments the share it
takes for ids (a taken segment counts against ``TRAP_MAX_QUERY_VARIANTS`` of
its path), with a sample of them. Real segments: the ``Allow``/``Disallow``
paths of Protego's robots.txt corpus (``--corpus``, fetched into
``.webcrawl/cache`` by ``tests/test_robots_corpus.py``) and the file and
directory names under ``--names`` (default ``/usr/share`` and this Python's
site-packages).

Settings read: none (command-line options only).
"""

from __future__ import annotations

import argparse
import base64
import importlib.metadata
import os
import random
import re
import string
import sysconfig
import uuid
from pathlib import Path

from extensions.spidermiddlewares.traps import is_token

ROOT = Path(__file__).resolve().parent.parent
RULE = re.compile(r"^\s*(?:dis)?allow\s*:\s*(\S+)", re.IGNORECASE | re.MULTILINE)
ALPHABETS = {
    "base62": string.ascii_letters + string.digits,
    "base64url": string.ascii_letters + string.digits + "-_",
    "lower+digits": string.ascii_lowercase + string.digits,
    "upper+digits": string.ascii_uppercase + string.digits,
}
LENGTHS = (10, 12, 16, 22, 32)


def real_segments(corpus: Path | None, names: list[Path]) -> set[str]:
    segments: set[str] = set()
    if corpus is not None and corpus.is_dir():
        for path in corpus.rglob("*"):
            if path.is_file():
                for rule in RULE.findall(path.read_text(errors="replace")):
                    segments |= {
                        s
                        for s in rule.split("?")[0].split("/")
                        if s and "*" not in s and "$" not in s
                    }
    for top in names:
        for _dir, dirs, files in os.walk(top):
            segments.update(dirs, files)
    return segments


def main() -> None:
    default_corpus = (
        ROOT
        / ".webcrawl"
        / "cache"
        / f"protego-{importlib.metadata.version('protego')}"
        / "tests"
        / "test_data"
    )
    parser = argparse.ArgumentParser(description=str(__doc__).splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=default_corpus)
    parser.add_argument(
        "--names",
        type=Path,
        nargs="*",
        default=[Path("/usr/share"), Path(sysconfig.get_paths()["purelib"])],
    )
    parser.add_argument("--n", type=int, default=3000, help="random ids per row")
    args = parser.parse_args()
    rng = random.Random(21)
    print(f"Random ids missed (of {args.n} each), by length:")
    print(f"  {'shape':<14}" + "".join(f"{n:>8}" for n in LENGTHS))
    for name, alphabet in ALPHABETS.items():
        row = []
        for n in LENGTHS:
            ids = [
                "".join(rng.choice(alphabet) for _ in range(n)) for _ in range(args.n)
            ]
            row.append(sum(not is_token(i) for i in ids) / args.n)
        print(f"  {name:<14}" + "".join(f"{r:>8.1%}" for r in row))
    shapes = {
        "uuid4": lambda: str(uuid.UUID(int=rng.getrandbits(128), version=4)),
        "16 bytes b64url": lambda: (
            base64.urlsafe_b64encode(rng.randbytes(16)).decode().rstrip("=")
        ),
        "hex of 16 bytes": lambda: rng.randbytes(16).hex(),
    }
    for name, make in shapes.items():
        missed = sum(not is_token(make()) for _ in range(args.n)) / args.n
        print(f"  {name:<14}{missed:>8.1%}")
    segments = real_segments(args.corpus, args.names)
    taken = sorted(s for s in segments if is_token(s))
    share = len(taken) / len(segments) if segments else 0.0
    print(f"Real segments taken for ids: {len(taken):,} of {len(segments):,}", end="")
    print(f" ({share:.2%})")
    print("  e.g. " + ", ".join(rng.sample(taken, min(30, len(taken)))))


if __name__ == "__main__":
    main()
