"""A tiny llama-architecture GGUF the engine tests generate themselves (about a second, nothing
downloaded): random weights, a SentencePiece-style vocabulary with byte fallback, sized so that
a token takes a few milliseconds on this machine's CPU.

The vocabulary: the special tokens, 256 byte tokens (<0x00>..<0xFF>, so any prompt tokenizes),
single characters, and the words of the gate's prompts with every prefix (SentencePiece merges
pairs, so a word is only reachable through its prefixes). The weights are arranged so that
generation never picks the end token, a control token or a byte token: one dimension of every
token embedding is a large constant, it dominates the final normalized hidden state, and the
output rows of those tokens weigh it strongly negative. Every answer runs to max_tokens, and
every generated token is a printable piece, one text delta each.
"""

from __future__ import annotations

import pathlib
import re

import gguf
import numpy as np

from plnt.gate import prompts

SPACE = "\u2581"  # SentencePiece's word boundary
CONSTANT_DIM = 0
CONSTANT = 8.0


def vocabulary(limit: int = 480) -> tuple[list[str], list[float], list[int]]:
    """(tokens, scores, types): specials, bytes, characters, then word pieces by frequency."""
    tokens = ["<unk>", "<s>", "</s>"]
    types = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL]
    tokens += [f"<0x{b:02X}>" for b in range(256)]
    types += [gguf.TokenType.BYTE] * 256
    text = " ".join(prompts.PROMPTS)
    chars = sorted({c for c in text if c.isalnum() or c in ".,:;'?!-()"})
    pieces = [SPACE, *chars, *(SPACE + c for c in chars if c.isalpha())]
    counts: dict[str, int] = {}
    for word in re.findall(r"[A-Za-z]+", text):
        for end in range(2, len(word) + 1):
            piece = SPACE + word[:end]
            counts[piece] = counts.get(piece, 0) + 1
    pieces += sorted(counts, key=lambda p: (-counts[p], len(p), p))
    seen = set(tokens)
    for piece in pieces:
        if len(tokens) >= limit:
            break
        if piece not in seen:
            seen.add(piece)
            tokens.append(piece)
            types.append(gguf.TokenType.NORMAL)
    # Longer pieces score higher, so merges prefer whole words.
    scores = [
        float(len(p)) if t == gguf.TokenType.NORMAL else 0.0
        for p, t in zip(tokens, types, strict=True)
    ]
    return tokens, scores, [int(t) for t in types]


def write(
    path: pathlib.Path,
    *,
    layers: int = 4,
    embedding: int = 256,
    feed_forward: int = 768,
    heads: int = 4,
    context: int = 8192,
    seed: int = 19,
) -> pathlib.Path:
    """Write the model to path; returns path."""
    tokens, scores, types = vocabulary()
    rng = np.random.default_rng(seed)
    vocab = len(tokens)

    def random(*shape: int, scale: float = 0.05) -> np.ndarray:
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name("plnt-tiny-test-model")
    writer.add_block_count(layers)
    writer.add_context_length(context)
    writer.add_embedding_length(embedding)
    writer.add_feed_forward_length(feed_forward)
    writer.add_head_count(heads)
    writer.add_head_count_kv(heads)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_dimension_count(embedding // heads)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores(scores)
    writer.add_token_types(types)
    writer.add_unk_token_id(0)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_add_bos_token(True)
    writer.add_add_eos_token(False)

    embeddings = random(vocab, embedding, scale=0.5)
    embeddings[:, CONSTANT_DIM] = CONSTANT
    output = random(vocab, embedding, scale=1.0)
    output[:, CONSTANT_DIM] = 0.0
    never = [i for i, t in enumerate(types) if t != gguf.TokenType.NORMAL]
    output[never, CONSTANT_DIM] = -100.0
    writer.add_tensor("token_embd.weight", embeddings)
    writer.add_tensor("output_norm.weight", np.ones(embedding, dtype=np.float32))
    writer.add_tensor("output.weight", output)
    for block in range(layers):
        name = f"blk.{block}"
        writer.add_tensor(f"{name}.attn_norm.weight", np.ones(embedding, dtype=np.float32))
        for part in ("attn_q", "attn_k", "attn_v", "attn_output"):
            writer.add_tensor(f"{name}.{part}.weight", random(embedding, embedding))
        writer.add_tensor(f"{name}.ffn_norm.weight", np.ones(embedding, dtype=np.float32))
        writer.add_tensor(f"{name}.ffn_gate.weight", random(feed_forward, embedding))
        writer.add_tensor(f"{name}.ffn_up.weight", random(feed_forward, embedding))
        writer.add_tensor(f"{name}.ffn_down.weight", random(embedding, feed_forward))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
