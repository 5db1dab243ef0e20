"""The built-in smoke-test prompts.

Lengths vary on purpose, from a few words to a few hundred: a canary that only answers short
prompts quickly (say, a broken prefix cache or a mis-sized prefill batch) still shows up in TTFT.
The texts are fixed so that two gate runs are comparable; each request starts with the run's
nonce and its index, so that no two requests of any two runs share a prefix. Engines cache
prompt prefixes (vLLM, SGLang, llama-server): a repeated smoke test would otherwise be answered
from the cache and measure a TTFT no new user sees (llama-server: 710 ms fell to 25 ms).
"""

from __future__ import annotations

_POLICY = (
    "Our team runs a fleet of GPU clusters that serve open-weight language models. Every model "
    "is rolled out as a canary first: a small share of the traffic goes to the new revision, "
    "and an automated gate measures how long the first token takes and how quickly the "
    "following tokens arrive. If the new revision is slower than the budget, the rollout is "
    "undone and the previous revision keeps all of the traffic. "
)

PROMPTS: tuple[str, ...] = (
    "Say hello.",
    "Name three primary colours.",
    "Explain in two sentences what a GPU is.",
    "Write a haiku about a quiet data centre at night.",
    "List five things to check before deploying a web service to production, one line each.",
    "Translate into French: 'The model is ready to serve requests in every region.'",
    "Summarise the following text in one paragraph:\n\n" + _POLICY * 2,
    "You are a reviewer. Read this design note and list its two weakest points:\n\n" + _POLICY * 4,
    "Write a short Python function that returns the n-th Fibonacci number, with a docstring.",
    "Answer the question at the end of this text.\n\n"
    + _POLICY * 8
    + "\nQuestion: what happens when the new revision is slower than the budget?",
    "Give one tip for writing clear commit messages.",
    "Describe the water cycle to a ten-year-old in under one hundred words.",
)


def prompt(index: int) -> str:
    """The prompt for the index-th request; the set repeats when more prompts are asked for."""
    return PROMPTS[index % len(PROMPTS)]


def content(index: int, nonce: str) -> str:
    """The index-th request's text: the nonce first, where a prefix cache would match."""
    return f"Request {nonce}-{index}. {prompt(index)}"


def messages(index: int, nonce: str) -> list[dict[str, str]]:
    """The chat messages for the index-th request of the run named by nonce."""
    return [{"role": "user", "content": content(index, nonce)}]
