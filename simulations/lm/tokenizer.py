"""Offline byte-level tokenizer built with the ``tokenizers`` library.

Ids 0-255 are the raw bytes, 256 ``<pad>``, 257 ``</s>`` (EOS), 258 ``<s>`` (BOS), 259 ``<unk>``
(reserved). Wrapped as a ``PreTrainedTokenizerFast`` so it saves/loads with ``save_pretrained`` /
``AutoTokenizer.from_pretrained`` like a real checkpoint's tokenizer.
"""

from __future__ import annotations

PAD_ID, EOS_ID, BOS_ID, UNK_ID = 256, 257, 258, 259
VOCAB_SIZE = 260


def _bytes_to_unicode() -> dict[int, str]:
    # The printable-character mapping of byte-level BPE (GPT-2's well-known table).
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def build_byte_tokenizer():
    """A ``PreTrainedTokenizerFast`` mapping each UTF-8 byte to its own id."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    table = _bytes_to_unicode()
    vocab = {table[b]: b for b in range(256)}
    vocab.update({"<pad>": PAD_ID, "</s>": EOS_ID, "<s>": BOS_ID, "<unk>": UNK_ID})
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>",
                                   unk_token="<unk>", padding_side="right")
