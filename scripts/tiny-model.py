#!/usr/bin/env python3
"""Writes a tiny Llama model with random weights as a GGUF file, for testing
tokenscope against a real llama.cpp server (scripts/llama-server.sh).

The model is a real Llama (token embeddings, RMS norms, rotary attention,
SwiGLU feed-forward) of a few layers and a small hidden size, with every
tokenizer.ggml.* key copied from one of llama.cpp's vocabulary files, so the
server tokenizes text as the real model family would:

  --vocab spm    models/ggml-vocab-llama-spm.gguf: Llama 2 SentencePiece,
                 32,000 tokens, BOS added; Llama 2's chat template
  --vocab gpt2   models/ggml-vocab-gpt-2.gguf: GPT-2 byte-level BPE,
                 50,257 tokens; a ChatML chat template

The weights are drawn from a normal distribution seeded by --seed: the same
arguments give a byte-identical file. The file is written atomically; without
--out it goes to a cache directory under a name that carries every input
(arguments, this script, the vocabulary file), and an existing file there is
reused. The path is printed on stdout.

Needs llama.cpp's gguf-py (found beside the vocabulary, or PYTHONPATH) and
numpy, PyYAML and sentencepiece (gguf-py imports them; Debian packages
python3-numpy, python3-yaml, python3-sentencepiece).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_LLAMA_SRC = REPO.parent / "shared" / "peers" / "llama.cpp"

VOCABS = {
    "spm": "ggml-vocab-llama-spm.gguf",
    "gpt2": "ggml-vocab-gpt-2.gguf",
}

# Llama 2's chat template as published with meta-llama/Llama-2-7b-chat-hf;
# llama.cpp recognises it (LLM_CHAT_TEMPLATE_LLAMA_2_SYS_BOS) without --jinja.
LLAMA2_TEMPLATE = (
    "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}"
    "{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}"
    "{% set system_message = false %}{% endif %}{% for message in loop_messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
    "{% endif %}{% if loop.index0 == 0 and system_message != false %}"
    "{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}"
    "{% else %}{% set content = message['content'] %}{% endif %}{% if message['role'] == 'user' %}"
    "{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}{% elif message['role'] == 'assistant' %}"
    "{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}"
)

# ChatML; llama.cpp recognises it (LLM_CHAT_TEMPLATE_CHATML) without --jinja.
CHATML_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content']"
    " + '<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
    "{% endif %}"
)

TEMPLATES = {"spm": LLAMA2_TEMPLATE, "gpt2": CHATML_TEMPLATE}


def fail(message: str) -> None:
    print(f"tiny-model.py: {message}", file=sys.stderr)
    sys.exit(1)


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--vocab", choices=sorted(VOCABS), default="spm", help="vocabulary (default: spm)")
    p.add_argument("--layers", type=int, default=2, help="transformer blocks, 2-4 (default: 2)")
    p.add_argument("--hidden", type=int, default=128, help="hidden size, 64-256 (default: 128)")
    p.add_argument("--heads", type=int, default=4, help="attention heads (default: 4)")
    p.add_argument("--kv-heads", type=int, default=2, help="key/value heads (GQA; default: 2)")
    p.add_argument("--ffn", type=int, default=0, help="feed-forward size (default: 2 x hidden)")
    p.add_argument("--context", type=int, default=8192, help="training context length (default: 8192)")
    p.add_argument("--seed", type=int, default=1, help="seed of the random weights (default: 1)")
    p.add_argument("--llama-src", type=Path,
                   default=Path(os.environ.get("TOKENSCOPE_LLAMA_SRC", DEFAULT_LLAMA_SRC)),
                   help="llama.cpp source (vocabulary files and gguf-py; default: ../shared/peers/llama.cpp)")
    p.add_argument("--out", type=Path, help="output file (default: a cached file named after the inputs)")
    p.add_argument("--cache-dir", type=Path,
                   default=Path(os.environ.get("TOKENSCOPE_PEERS_CACHE", Path.home() / ".cache" / "tokenscope"))
                   / "models",
                   help="where files without --out go (default: $TOKENSCOPE_PEERS_CACHE/models)")
    p.add_argument("--force", action="store_true", help="write the file even when it exists")
    a = p.parse_args()
    if not 2 <= a.layers <= 4:
        fail(f"--layers {a.layers}: expected 2 to 4")
    if not 64 <= a.hidden <= 256:
        fail(f"--hidden {a.hidden}: expected 64 to 256")
    if a.heads <= 0 or a.hidden % a.heads != 0 or (a.hidden // a.heads) % 2 != 0:
        fail(f"--heads {a.heads}: must divide --hidden {a.hidden} into an even head size")
    if a.kv_heads <= 0 or a.heads % a.kv_heads != 0:
        fail(f"--kv-heads {a.kv_heads}: must divide --heads {a.heads}")
    if a.ffn == 0:
        a.ffn = 2 * a.hidden
    if a.ffn <= 0 or a.context <= 0:
        fail("--ffn and --context must be positive")
    return a


def import_gguf(llama_src: Path):
    gguf_py = llama_src / "gguf-py"
    if gguf_py.is_dir():
        sys.path.insert(0, str(gguf_py))
    try:
        import numpy  # noqa: F401
    except ImportError:
        # Another python3 first on PATH (pyenv, a venv) lacks Debian's packages: use Debian's.
        debian = "/usr/bin/python3"
        if os.path.realpath(sys.executable) != os.path.realpath(debian) and os.path.exists(debian) \
                and not os.environ.get("TOKENSCOPE_TINY_MODEL_REEXEC"):
            os.environ["TOKENSCOPE_TINY_MODEL_REEXEC"] = "1"
            os.execv(debian, [debian, str(Path(__file__).resolve())] + sys.argv[1:])
        fail("numpy is missing (Debian: apt-get install python3-numpy; scripts/setup.sh installs it)")
    try:
        import gguf
    except ImportError as e:
        fail(f"cannot import llama.cpp's gguf-py from {gguf_py} ({e}); "
             "scripts/setup.sh installs python3-numpy, python3-yaml, python3-sentencepiece")
    return gguf


def tokenizer_fields(gguf, vocab_file: Path) -> list[tuple[str, object, object]]:
    """Every tokenizer.ggml.* key of vocab_file as (key, value, GGUF type)."""
    reader = gguf.GGUFReader(vocab_file)
    T = gguf.GGUFValueType
    out = []
    for key, field in reader.fields.items():
        if not key.startswith("tokenizer.ggml."):
            continue
        kind = field.types[0]
        if kind == T.ARRAY:
            sub = field.types[1]
            if sub == T.STRING:
                value = [bytes(field.parts[i]) for i in field.data]
            elif sub == T.FLOAT32:
                value = [float(field.parts[i][0]) for i in field.data]
            elif sub == T.INT32:
                value = [int(field.parts[i][0]) for i in field.data]
            else:
                fail(f"{vocab_file}: {key}: arrays of {sub.name} are not handled")
        elif kind == T.STRING:
            value = bytes(field.parts[field.data[0]]).decode("utf-8")
        elif kind == T.BOOL:
            value = bool(field.parts[field.data[0]][0])
        elif kind in (T.FLOAT32, T.FLOAT64):
            value = float(field.parts[field.data[0]][0])
        else:
            value = int(field.parts[field.data[0]][0])
        out.append((key, value, kind))
    if not any(k == "tokenizer.ggml.tokens" for k, _, _ in out):
        fail(f"{vocab_file}: no tokenizer.ggml.tokens")
    return out


def write_model(gguf, a: argparse.Namespace, vocab_file: Path, out: Path) -> None:
    import numpy as np

    fields = tokenizer_fields(gguf, vocab_file)
    n_vocab = len(next(v for k, v, _ in fields if k == "tokenizer.ggml.tokens"))
    head_dim = a.hidden // a.heads
    rng = np.random.default_rng(a.seed)

    def weight(rows: int, cols: int) -> "np.ndarray":
        # numpy shape (rows, cols) is ggml's ne = [cols, rows]: cols is the input size.
        return (rng.standard_normal((rows, cols), dtype=np.float32) * 0.02).astype(np.float16)

    def norm(n: int) -> "np.ndarray":
        return np.ones(n, dtype=np.float32)

    tmp = tempfile.NamedTemporaryFile(dir=out.parent, prefix=out.name + ".", suffix=".tmp", delete=False)
    tmp.close()
    try:
        w = gguf.GGUFWriter(tmp.name, "llama")
        w.add_name(f"tokenscope-tiny-llama-{a.vocab}")
        w.add_context_length(a.context)
        w.add_embedding_length(a.hidden)
        w.add_block_count(a.layers)
        w.add_feed_forward_length(a.ffn)
        w.add_head_count(a.heads)
        w.add_head_count_kv(a.kv_heads)
        w.add_rope_dimension_count(head_dim)
        w.add_rope_freq_base(10000.0)
        w.add_layer_norm_rms_eps(1e-5)
        w.add_vocab_size(n_vocab)
        w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
        for key, value, kind in fields:
            w.add_key_value(key, value, kind)
        w.add_chat_template(TEMPLATES[a.vocab])

        # Output projection tied to the token embeddings (no output.weight).
        w.add_tensor("token_embd.weight", weight(n_vocab, a.hidden))
        w.add_tensor("output_norm.weight", norm(a.hidden))
        for i in range(a.layers):
            b = f"blk.{i}."
            w.add_tensor(b + "attn_norm.weight", norm(a.hidden))
            w.add_tensor(b + "attn_q.weight", weight(a.heads * head_dim, a.hidden))
            w.add_tensor(b + "attn_k.weight", weight(a.kv_heads * head_dim, a.hidden))
            w.add_tensor(b + "attn_v.weight", weight(a.kv_heads * head_dim, a.hidden))
            w.add_tensor(b + "attn_output.weight", weight(a.hidden, a.heads * head_dim))
            w.add_tensor(b + "ffn_norm.weight", norm(a.hidden))
            w.add_tensor(b + "ffn_gate.weight", weight(a.ffn, a.hidden))
            w.add_tensor(b + "ffn_up.weight", weight(a.ffn, a.hidden))
            w.add_tensor(b + "ffn_down.weight", weight(a.hidden, a.ffn))
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        os.chmod(tmp.name, 0o644)
        os.replace(tmp.name, out)
    except BaseException:
        Path(tmp.name).unlink(missing_ok=True)
        raise


def main() -> None:
    a = parse_args()
    vocab_file = a.llama_src / "models" / VOCABS[a.vocab]
    if not vocab_file.is_file():
        fail(f"no vocabulary file {vocab_file} (set --llama-src or TOKENSCOPE_LLAMA_SRC)")
    gguf = import_gguf(a.llama_src)

    if a.out is None:
        h = hashlib.sha256()
        h.update(Path(__file__).read_bytes())
        h.update(vocab_file.read_bytes())
        h.update(repr((a.vocab, a.layers, a.hidden, a.heads, a.kv_heads, a.ffn, a.context, a.seed)).encode())
        out = a.cache_dir / (f"tiny-llama-{a.vocab}-l{a.layers}-h{a.hidden}-s{a.seed}-"
                             f"{h.hexdigest()[:12]}.gguf")
    else:
        out = a.out
    out = out.resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    if a.force or not out.is_file():
        write_model(gguf, a, vocab_file, out)
    print(out)


if __name__ == "__main__":
    main()
