"""The emulator's tokenizer: deterministic, written as a `tokenizer.json` others can load.

A byte-level BPE (the GPT-2/Llama-3 family's scheme) trained with the `tokenizers` package on
the English text of Python's own documentation (`pydoc_data`), so no download is needed. Being
byte-level with a whitespace-splitting pre-tokenizer, text that shares a prefix up to a word
boundary shares the token prefix, which is what prefix caching and cache-aware routing key on.

The directory it is saved to also holds a `tokenizer_config.json` with a Llama-3-style chat
template, so smg (given the directory as the worker's `model_path`) tokenizes exactly
as the emulator does. The directory is keyed by a digest of everything the training depends on,
so every emulator on a machine shares one build.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import tokenizers
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

VOCAB_SIZE = 8192
BOS, EOT = "<|begin_of_text|>", "<|eot_id|>"
HEADER_START, HEADER_END = "<|start_header_id|>", "<|end_header_id|>"
SPECIAL_TOKENS = [BOS, "<|end_of_text|>", HEADER_START, HEADER_END, EOT]

CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' }}"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}{% if part['type'] == 'text' %}"
    "{{ part['text'] }}{% endif %}{% endfor %}{% endif %}{{ '<|eot_id|>' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}"
    "{% endif %}"
)


def default_cache_dir() -> Path:
    """`$RADIXFLEET_CACHE_DIR`, else `$XDG_CACHE_HOME/radixfleet`, else `~/.cache/radixfleet`."""
    explicit = os.environ.get("RADIXFLEET_CACHE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "radixfleet"


def _corpus() -> list[str]:
    from pydoc_data import topics  # the stdlib's English reference text

    return [line for text in topics.topics.values() for line in text.splitlines() if line]


def _train(lines: Sequence[str]) -> Tokenizer:
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        min_frequency=2,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=SPECIAL_TOKENS,
        show_progress=False,
    )
    tokenizer.train_from_iterator(lines, trainer=trainer)
    return tokenizer


def _config() -> dict[str, object]:
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": BOS,
        "eos_token": EOT,
        "pad_token": EOT,
        "add_bos_token": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": 131072,
        "chat_template": CHAT_TEMPLATE,
    }


def ensure_tokenizer_dir(cache_dir: Path | None = None) -> Path:
    """The directory holding tokenizer.json and tokenizer_config.json; built on first use."""
    lines = _corpus()
    digest = hashlib.sha256()
    for part in (tokenizers.__version__, str(VOCAB_SIZE), *SPECIAL_TOKENS, *lines):
        digest.update(part.encode())
    target = (cache_dir or default_cache_dir()) / f"tokenizer-{digest.hexdigest()[:16]}"
    if (target / "tokenizer.json").is_file() and (target / "tokenizer_config.json").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    # Build aside and rename, so concurrent emulators never read a half-written directory.
    staging = Path(tempfile.mkdtemp(prefix=".tokenizer-", dir=target.parent))
    _train(lines).save(str(staging / "tokenizer.json"))
    (staging / "tokenizer_config.json").write_text(json.dumps(_config(), indent=2))
    (staging / "config.json").write_text(json.dumps({"model_type": "llama"}))
    try:
        staging.rename(target)
    except OSError:  # another process won the race; its build is identical
        for child in staging.iterdir():
            child.unlink()
        staging.rmdir()
    return target


@dataclass(frozen=True)
class EmulatorTokenizer:
    """Encoding, decoding, chat prompts and canned answers, all in the saved tokenization."""

    path: Path
    tokenizer: Tokenizer
    eos_token_id: int
    answer_ids: tuple[int, ...]

    def encode(self, text: str) -> list[int]:
        """Token ids of `text`; special tokens in the text are recognised.

        Through `encode_batch`, which lets go of the GIL while Rust tokenizes (`encode` holds
        it): the emulator tokenizes on a worker thread and its event loop must keep running.
        """
        (encoding,) = self.tokenizer.encode_batch([text], add_special_tokens=False)
        return list(encoding.ids)

    def decode(self, ids: Sequence[int]) -> str:
        """Text of `ids`, special tokens dropped."""
        return self.tokenizer.decode(list(ids), skip_special_tokens=True)

    def chat_prompt(self, messages: Sequence[tuple[str, str]]) -> str:
        """The chat template applied to `(role, content)` pairs, with the generation prompt."""
        parts = [BOS]
        for role, content in messages:
            parts.append(f"{HEADER_START}{role}{HEADER_END}\n\n{content}{EOT}")
        parts.append(f"{HEADER_START}assistant{HEADER_END}\n\n")
        return "".join(parts)

    def answer(self, *, seed: int, length: int) -> list[int]:
        """`length` whole-word tokens chosen by `seed`; they re-encode to the same ids."""
        return random.Random(seed).choices(self.answer_ids, k=length)


def _whole_words(tokenizer: Tokenizer) -> tuple[int, ...]:
    """Ids of tokens that are one space-led word and survive a decode/encode round trip."""
    words = []
    for token, token_id in sorted(tokenizer.get_vocab().items(), key=lambda item: item[1]):
        word = token[1:]  # after the byte-level space marker
        if not (token[0] == "\u0120" and word.isascii() and word.isalpha() and len(word) >= 3):
            continue
        text = tokenizer.decode([token_id])
        if tokenizer.encode(text, add_special_tokens=False).ids == [token_id]:
            words.append(token_id)
    return tuple(words)


def load_tokenizer(cache_dir: Path | None = None) -> EmulatorTokenizer:
    """Build (once per machine) and load the emulator's tokenizer."""
    path = ensure_tokenizer_dir(cache_dir)
    tokenizer = Tokenizer.from_file(str(path / "tokenizer.json"))
    eos = tokenizer.token_to_id(EOT)
    if eos is None:
        raise RuntimeError(f"{path}/tokenizer.json has no {EOT} token")
    return EmulatorTokenizer(
        path=path, tokenizer=tokenizer, eos_token_id=eos, answer_ids=_whole_words(tokenizer)
    )
