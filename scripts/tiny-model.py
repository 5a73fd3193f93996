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
  --vocab hf:PATH  the vocabulary of a Hugging Face tokenizer.json with a
                 byte-level BPE model (PATH: the file, or a directory holding
                 it), converted as llama.cpp's convert_hf_to_gguf.py does:
                 tokenizer.ggml.model "gpt2"; tokenizer.ggml.pre from the
                 Split pre-tokenizer's regex ("llama-bpe" for Llama 3,
                 "qwen2" for Qwen2/Qwen3, "gpt-2" for GPT-2's ByteLevel) or
                 --pre NAME; every token in id order, added tokens included
                 (gaps filled with unused "[PADn]"); token types normal,
                 control (special added tokens, and added tokens that look
                 like <|...|>), user-defined (other added tokens); merges
                 ("a b" strings or ["a", "b"] pairs); BOS/EOS from the
                 tokenizer_config.json beside it, else by name; add_bos_token
                 only when the tokenizer.json's post_processor adds the BOS
                 (add_eos_token likewise); Llama 3's chat template for
                 llama-bpe, ChatML otherwise. The model's vocabulary size is
                 the number of tokens.

With --arch bert-rerank the model is instead a tiny BERT cross-encoder for
llama-server --reranking (llama.cpp's "bert" architecture: learned position
and token-type embeddings, LayerNorm, GELU feed-forward, bidirectional
attention, and the classification head cls / cls.output that its rank
pooling reads), with the same vocabularies; the separator token llama.cpp
puts between a query and a document (tokenizer.ggml.seperator_token_id) is
the EOS.

The weights are drawn from a normal distribution seeded by --seed: the same
arguments give a byte-identical file. The file is written atomically; without
--out it goes to a cache directory under a name that carries every input
(arguments, this script, the vocabulary file, or the tokenizer.json and its
tokenizer_config.json), and an existing file there is reused. The path is
printed on stdout.

Needs llama.cpp's gguf-py (found beside the vocabulary, or PYTHONPATH) and
numpy, PyYAML and sentencepiece (gguf-py imports them; Debian packages
python3-numpy, python3-yaml, python3-sentencepiece).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
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

# Llama 3's chat template as published with meta-llama/Meta-Llama-3-8B-Instruct;
# llama.cpp recognises it (LLM_CHAT_TEMPLATE_LLAMA_3) without --jinja.
LLAMA3_TEMPLATE = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}"
    "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'"
    "+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}"
    "{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"
)

TEMPLATES = {"spm": LLAMA2_TEMPLATE, "gpt2": CHATML_TEMPLATE}

# The Split regexes of the tokenizer.json files llama.cpp knows, and the
# tokenizer.ggml.pre names it gives them (llama-vocab.cpp; convert_hf_to_gguf.py
# tells them apart by hashing token ids, which needs the transformers library).
HF_PRE_REGEXES = {
    # Llama 3 (also Llama 3.1-3.3): digits in runs of up to three.
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*"
    "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+": "llama-bpe",
    # Qwen2, Qwen2.5, Qwen3: every digit alone.
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*"
    "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+": "qwen2",
}
# What llama.cpp does besides the regex for these names (llama-vocab.cpp):
# llama-bpe ignores merges for words already in the vocabulary, as the
# tokenizer.json's model.ignore_merges says for Llama 3.
HF_PRE_IGNORE_MERGES = {"llama-bpe": True, "qwen2": False, "gpt-2": False}
HF_BOS_NAMES = ("<|begin_of_text|>", "<s>", "<bos>", "<|startoftext|>", "<|endoftext|>")
HF_EOS_NAMES = ("<|end_of_text|>", "</s>", "<eos>", "<|endoftext|>", "<|im_end|>")


def fail(message: str) -> None:
    print(f"tiny-model.py: {message}", file=sys.stderr)
    sys.exit(1)


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--vocab", default="spm",
                   help="vocabulary: spm, gpt2, or hf:PATH (a tokenizer.json, or a directory holding one; "
                        "default: spm)")
    p.add_argument("--pre", help="with hf:PATH, llama.cpp's pre-tokenizer name (tokenizer.ggml.pre) instead of "
                                 "the one told by the tokenizer.json's regex")
    p.add_argument("--arch", default="llama", choices=["llama", "bert-rerank"],
                   help="llama (default), or bert-rerank: a BERT cross-encoder for llama-server --reranking")
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
    a.hf = None
    if a.vocab.startswith("hf:"):
        a.hf = Path(a.vocab[3:])
        if a.hf.is_dir():
            a.hf = a.hf / "tokenizer.json"
        if not a.hf.is_file():
            fail(f"--vocab {a.vocab}: no such tokenizer.json")
        a.hf = a.hf.resolve()
    elif a.vocab not in VOCABS:
        fail(f"--vocab {a.vocab}: expected one of {', '.join(sorted(VOCABS))} or hf:PATH")
    if a.pre is not None and a.hf is None:
        fail("--pre goes with --vocab hf:PATH")
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


def hf_pre_name(tok: dict, path: Path) -> str:
    """llama.cpp's tokenizer.ggml.pre for a tokenizer.json, told by its pre-tokenizer."""
    pre = tok.get("pre_tokenizer") or {}
    steps = pre.get("pretokenizers", []) if pre.get("type") == "Sequence" else [pre]
    regexes = [s.get("pattern", {}).get("Regex") for s in steps if s.get("type") == "Split"]
    if len(regexes) == 1 and regexes[0] in HF_PRE_REGEXES:
        return HF_PRE_REGEXES[regexes[0]]
    if not regexes and len(steps) == 1 and steps[0].get("type") == "ByteLevel" and steps[0].get("use_regex", True):
        return "gpt-2"
    fail(f"{path}: pre-tokenizer {json.dumps(pre)[:300]} is not one this script recognises "
         "(Llama 3, Qwen2/Qwen3, GPT-2); name llama.cpp's pre-tokenizer with --pre "
         "(see llama.cpp's src/llama-vocab.cpp)")
    return ""


def hf_adds(post: dict | None, token: str) -> tuple[bool, bool]:
    """(first, last): whether the post-processor puts `token` before / after a single sequence."""
    if not post:
        return False, False
    kind = post.get("type")
    if kind == "Sequence":
        first = last = False
        for step in post.get("processors", []):
            f, l = hf_adds(step, token)
            first, last = first or f, last or l
        return first, last
    if kind == "TemplateProcessing":
        single = post.get("single", [])
        ids = [item["SpecialToken"]["id"] if "SpecialToken" in item else None for item in single]
        return bool(ids) and ids[0] == token, bool(ids) and ids[-1] == token
    if kind in ("RobertaProcessing", "BertProcessing"):
        return post.get("cls", [None])[0] == token, post.get("sep", [None])[0] == token
    return False, False  # ByteLevel and the like add no token


def hf_tokenizer_fields(gguf, path: Path, tok: dict, pre: str) -> tuple[list[tuple[str, object, object]], str]:
    """The tokenizer.ggml.* keys for a Hugging Face tokenizer.json (parsed:
    `tok`) and the chat template. Follows convert_hf_to_gguf.py
    (get_vocab_base, _set_vocab_gpt2) and gguf-py's SpecialVocab without
    needing the transformers library."""
    model = tok["model"]
    if pre in HF_PRE_IGNORE_MERGES and bool(model.get("ignore_merges", False)) != HF_PRE_IGNORE_MERGES[pre]:
        print(f"tiny-model.py: warning: {path}: model.ignore_merges is {model.get('ignore_merges')}, "
              f"llama.cpp's {pre!r} has {HF_PRE_IGNORE_MERGES[pre]}", file=sys.stderr)

    T = gguf.TokenType
    by_id: dict[int, tuple[str, int]] = {}
    for text, i in model["vocab"].items():
        by_id[int(i)] = (text, T.NORMAL)
    added = tok.get("added_tokens") or []
    for t in added:
        text = t["content"]
        # As convert_hf_to_gguf.py: special tokens and those that look like <|...|> are control tokens.
        control = t.get("special", False) or (text.startswith("<|") and text.endswith("|>"))
        by_id[int(t["id"])] = (text, T.CONTROL if control else T.USER_DEFINED)
    n = max(by_id) + 1
    tokens: list[str] = []
    types: list[int] = []
    for i in range(n):
        text, kind = by_id.get(i, (f"[PAD{i}]", T.UNUSED))
        tokens.append(text)
        types.append(int(kind))
    seen: dict[str, int] = {}
    for i, text in enumerate(tokens):
        if text in seen:
            fail(f"{path}: token {text!r} has ids {seen[text]} and {i} (llama.cpp needs distinct token texts)")
        seen[text] = i

    merges = model.get("merges") or []
    if merges and isinstance(merges[0], list):
        # ["a", "b"] pairs (tokenizers >= 0.20): a space inside a part is written as
        # U+0120, as gguf-py's SpecialVocab does (llama.cpp splits "a b" at the space).
        merges = [" ".join("".join(chr(ord(c) + 256) if c == " " else c for c in part) for part in pair)
                  for pair in merges]
    if not merges or not all(isinstance(m, str) and " " in m[1:] for m in merges):
        fail(f"{path}: model.merges: expected \"a b\" strings or [\"a\", \"b\"] pairs")

    config: dict = {}
    config_file = path.parent / "tokenizer_config.json"
    if config_file.is_file():
        config = json.loads(config_file.read_text(encoding="utf-8"))

    def special(kind: str, names: tuple[str, ...]) -> str | None:
        entry = config.get(f"{kind}_token")
        if isinstance(entry, dict):
            entry = entry.get("content")
        if isinstance(entry, str) and entry in seen:
            return entry
        # Absent or null (Qwen has no BOS): the first known name among the added
        # tokens (Qwen's vocabulary has "<s>" as plain text), as real conversions get
        # it from config.json (Qwen's bos_token_id is <|endoftext|>).
        return next((name for name in names if name in added_names), None)

    added_names = {t["content"] for t in added}
    bos, eos = special("bos", HF_BOS_NAMES), special("eos", HF_EOS_NAMES)
    post = tok.get("post_processor")
    add_bos = bos is not None and hf_adds(post, bos)[0]
    add_eos = eos is not None and hf_adds(post, eos)[1]

    K = gguf.Keys.Tokenizer
    V = gguf.GGUFValueType
    fields: list[tuple[str, object, object]] = [
        (K.MODEL, "gpt2", V.STRING),
        (K.PRE, pre, V.STRING),
        (K.LIST, [t.encode("utf-8") for t in tokens], V.ARRAY),
        (K.TOKEN_TYPE, types, V.ARRAY),
        (K.MERGES, [m.encode("utf-8") for m in merges], V.ARRAY),
    ]
    if bos is not None:
        fields.append((K.BOS_ID, seen[bos], V.UINT32))
    if eos is not None:
        fields.append((K.EOS_ID, seen[eos], V.UINT32))
    # Written either way: llama.cpp's default for llama-bpe is to add a BOS.
    fields.append((K.ADD_BOS, add_bos, V.BOOL))
    fields.append((K.ADD_EOS, add_eos, V.BOOL))
    template = LLAMA3_TEMPLATE if pre == "llama-bpe" else CHATML_TEMPLATE
    return fields, template


def write_model(gguf, a: argparse.Namespace, fields: list, template: str, label: str, out: Path) -> None:
    import numpy as np

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
        w.add_name(f"tokenscope-tiny-llama-{label}")
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
        w.add_chat_template(template)

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


def write_bert_reranker(gguf, a: argparse.Namespace, fields: list, label: str, out: Path) -> None:
    import numpy as np

    n_vocab = len(next(v for k, v, _ in fields if k == "tokenizer.ggml.tokens"))
    eos = next((v for k, v, _ in fields if k == "tokenizer.ggml.eos_token_id"), None)
    if eos is None:
        fail("the vocabulary has no EOS token: a reranker needs one as its separator")
    rng = np.random.default_rng(a.seed)

    def weight(rows: int, cols: int) -> "np.ndarray":
        return (rng.standard_normal((rows, cols), dtype=np.float32) * 0.02).astype(np.float16)

    def ones(n: int) -> "np.ndarray":
        return np.ones(n, dtype=np.float32)

    def zeros(n: int) -> "np.ndarray":
        return np.zeros(n, dtype=np.float32)

    tmp = tempfile.NamedTemporaryFile(dir=out.parent, prefix=out.name + ".", suffix=".tmp", delete=False)
    tmp.close()
    try:
        w = gguf.GGUFWriter(tmp.name, "bert")
        w.add_name(f"tokenscope-tiny-bert-rerank-{label}")
        w.add_context_length(a.context)
        w.add_embedding_length(a.hidden)
        w.add_block_count(a.layers)
        w.add_feed_forward_length(a.ffn)
        w.add_head_count(a.heads)
        w.add_layer_norm_eps(1e-12)
        w.add_causal_attention(False)
        w.add_pooling_type(gguf.PoolingType.CLS)  # as converted rerankers are; --reranking makes it rank pooling
        w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
        for key, value, kind in fields:
            w.add_key_value(key, value, kind)
        w.add_token_type_count(2)
        w.add_sep_token_id(eos)

        w.add_tensor("token_embd.weight", weight(n_vocab, a.hidden))
        w.add_tensor("token_types.weight", weight(2, a.hidden).astype(np.float32))
        w.add_tensor("position_embd.weight", weight(a.context, a.hidden))
        w.add_tensor("token_embd_norm.weight", ones(a.hidden))
        w.add_tensor("token_embd_norm.bias", zeros(a.hidden))
        for i in range(a.layers):
            b = f"blk.{i}."
            for name in ("attn_q", "attn_k", "attn_v", "attn_output"):
                w.add_tensor(b + name + ".weight", weight(a.hidden, a.hidden))
                w.add_tensor(b + name + ".bias", zeros(a.hidden))
            w.add_tensor(b + "attn_output_norm.weight", ones(a.hidden))
            w.add_tensor(b + "attn_output_norm.bias", zeros(a.hidden))
            w.add_tensor(b + "ffn_up.weight", weight(a.ffn, a.hidden))
            w.add_tensor(b + "ffn_up.bias", zeros(a.ffn))
            w.add_tensor(b + "ffn_down.weight", weight(a.hidden, a.ffn))
            w.add_tensor(b + "ffn_down.bias", zeros(a.hidden))
            w.add_tensor(b + "layer_output_norm.weight", ones(a.hidden))
            w.add_tensor(b + "layer_output_norm.bias", zeros(a.hidden))
        w.add_tensor("cls.weight", weight(a.hidden, a.hidden))
        w.add_tensor("cls.bias", zeros(a.hidden))
        w.add_tensor("cls.output.weight", weight(1, a.hidden))
        w.add_tensor("cls.output.bias", zeros(1))
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
    if a.hf is None:
        vocab_file = a.llama_src / "models" / VOCABS[a.vocab]
        if not vocab_file.is_file():
            fail(f"no vocabulary file {vocab_file} (set --llama-src or TOKENSCOPE_LLAMA_SRC)")
        inputs = [vocab_file]
        label = a.vocab
    else:
        inputs = [a.hf] + [f for f in [a.hf.parent / "tokenizer_config.json"] if f.is_file()]

    def load_hf() -> tuple[dict, str]:
        try:
            tok = json.loads(a.hf.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            fail(f"{a.hf}: not a tokenizer.json: {e}")
        model = tok.get("model") if isinstance(tok, dict) else None
        if not isinstance(model, dict) or model.get("type") != "BPE" or not isinstance(model.get("vocab"), dict):
            fail(f"{a.hf}: model.type {(model or {}).get('type')!r}: only BPE models convert to llama.cpp's "
                 "gpt2 vocabulary")
        if model.get("byte_fallback"):
            fail(f"{a.hf}: a BPE model with byte_fallback is SentencePiece-like (llama.cpp's spm), "
                 "not byte-level BPE")
        pre = a.pre or hf_pre_name(tok, a.hf)
        vocab_cpp = a.llama_src / "src" / "llama-vocab.cpp"
        if vocab_cpp.is_file():
            known = set(re.findall(r'tokenizer_pre == "([^"]+)"', vocab_cpp.read_text(encoding="utf-8")))
            if known and pre not in known:
                fail(f"--pre {pre}: llama.cpp ({vocab_cpp}) knows {', '.join(sorted(known))}")
        return tok, pre

    tok: dict = {}
    if a.out is None:
        h = hashlib.sha256()
        h.update(Path(__file__).read_bytes())
        for f in inputs:
            h.update(f.read_bytes())
        h.update(repr((a.vocab if a.hf is None else "hf", a.pre, a.layers, a.hidden, a.heads, a.kv_heads, a.ffn,
                       a.context, a.seed) + ((a.arch,) if a.arch != "llama" else ())).encode())
        tail = f"-l{a.layers}-h{a.hidden}-s{a.seed}-{h.hexdigest()[:12]}.gguf"
        stem = "tiny-llama" if a.arch == "llama" else "tiny-bert-rerank"
        cached = sorted(a.cache_dir.glob(f"{stem}-hf-*{tail}")) if a.hf is not None and not a.force else []
        if cached:
            out = cached[0]  # named after the pre-tokenizer: found without parsing the tokenizer.json again
        else:
            if a.hf is not None:
                tok, pre = load_hf()
                label = "hf-" + pre
            out = a.cache_dir / f"{stem}-{label}{tail}"
    else:
        out = a.out
    out = out.resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    if a.force or not out.is_file():
        gguf = import_gguf(a.llama_src)
        if a.hf is None:
            fields, template = tokenizer_fields(gguf, vocab_file), TEMPLATES[a.vocab]
        else:
            if not tok:
                tok, pre = load_hf()
                label = "hf-" + pre
            fields, template = hf_tokenizer_fields(gguf, a.hf, tok, pre)
        if a.arch == "bert-rerank":
            write_bert_reranker(gguf, a, fields, label, out)
        else:
            write_model(gguf, a, fields, template, label, out)
    print(out)


if __name__ == "__main__":
    main()
