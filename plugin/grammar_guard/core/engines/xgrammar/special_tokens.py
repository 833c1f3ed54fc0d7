"""Special tokens kept out of xgrammar's grammar text, except where a grammar names them.

xgrammar matches a special token's text like any other token's, so inside
a JSON string a model could sample ``<|eot_id|>`` or a reserved placeholder
(which vLLM then drops from the output). Grammars are therefore compiled
against the vocabulary with those tokens blank, which xgrammar never lets
into text. A grammar that names some of them (a token element, or a
structural tag that writes a tool-call token out) gets a vocabulary where
those keep their text. Stop tokens need no text: xgrammar allows them
wherever the grammar may end.
"""

from __future__ import annotations

import json
import re
import threading
from collections import OrderedDict
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

import xgrammar as xgr

from grammar_guard.core.request.grammar_text import EBNF_LITERAL_OR_CLASS
from grammar_guard.core.request.spec import GrammarSpec, RequestKind

# Goes into the fingerprint with the special tokens themselves: how they are
# kept out of grammar text, and when a grammar gets some of them back.
SPECIAL_TOKEN_RULE = "special-tokens-only-where-named"
# Vocabularies that let some special tokens back in, one per set of tokens
# grammars name: a model's tool-call tags name the same few every time.
_NAMING_VOCABULARIES = 4
# A token element of printed EBNF, Token(5) or Token(5, 6): Lark's <[5]>.
_TOKEN_ELEMENT = re.compile(r"\bToken\(([\d,\s]+)\)")
# Structural-tag fields that hold no text the tag writes out: schemas (their
# strings are content) and what must not appear.
_NOT_WRITTEN = frozenset({"json_schema", "schema", "excludes", "exclude_tokens"})
# The kinds whose grammars can name tokens.
_NAMING_KINDS = (RequestKind.GRAMMAR, RequestKind.STRUCTURAL_TAG)


def hf_special_token_ids(tokenizer: Any) -> frozenset[int]:
    """The control tokens of a Hugging Face tokenizer, which grammar text must never hold.

    Its added tokens marked special, the special tokens it names (EOS, BOS,
    padding...), and added tokens written as a tag (``<think>``, DeepSeek's
    chat-role and tool-call tokens) whether marked special or not:
    llguidance reads those as special too, and a request must get the same
    tokens whichever engine serves it.
    """
    added = tokenizer.added_tokens_decoder  # id -> AddedToken
    control = {
        int(token_id)
        for token_id, token in added.items()
        if token.special or (token.content.startswith("<") and token.content.endswith(">"))
    }
    return frozenset(control.union(int(token_id) for token_id in tokenizer.all_special_ids))


@dataclass(frozen=True)
class Vocabulary:
    info: xgr.TokenizerInfo
    compiler: xgr.GrammarCompiler


class SpecialTokenVocabularies:
    """The vocabularies grammars over ``tokenizer_info`` compile against, one per named set."""

    def __init__(
        self,
        tokenizer_info: xgr.TokenizerInfo,
        special_token_ids: Collection[int],
        *,
        compile_threads: int,
    ) -> None:
        # The tokenizer's own vocabulary, special tokens' texts included.
        self._tokenizer_info = tokenizer_info
        self._compile_threads = compile_threads
        size = tokenizer_info.vocab_size
        self.special_ids = frozenset(t for t in map(int, special_token_ids) if 0 <= t < size)
        # The vocabularies are rebuilt from the decoded texts, as a raw
        # vocabulary (which xgrammar matches as it matches the encoded one).
        self._texts = (
            [bytes(text) for text in tokenizer_info.decoded_vocab] if self.special_ids else []
        )
        # An empty text names nothing: xgrammar already treats that token as special.
        self._special_texts = {
            token: text.decode(errors="replace")
            for token in self.special_ids
            if (text := self._texts[token])
        }
        self._naming: OrderedDict[frozenset[int], Vocabulary] = OrderedDict()
        self._naming_lock = threading.Lock()
        self._default = self._new_vocabulary(frozenset())

    def named_tokens(self, spec: GrammarSpec, grammar: xgr.Grammar) -> frozenset[int]:
        """The special tokens ``spec`` names, which its grammar may then produce.

        A grammar names a token by id (a token element); a structural tag
        also by writing its text out, as the tool-call tags of vLLM's parsers
        and xgrammar's model templates write ``<|python_tag|>`` or
        ``<|channel|>``. Such a token is then allowed wherever its text is,
        the tag's contents included; every other special token stays out.
        """
        if not self.special_ids or spec.kind not in _NAMING_KINDS:
            return frozenset()
        printed = EBNF_LITERAL_OR_CLASS.sub("", str(grammar))
        named = {int(t) for ids in _TOKEN_ELEMENT.findall(printed) for t in ids.split(",")}
        if spec.kind is RequestKind.STRUCTURAL_TAG:
            ids, texts = _tag_tokens(json.loads(spec.text))
            written = "\0".join(texts)
            named.update(ids)
            named.update(token for token, text in self._special_texts.items() if text in written)
        return frozenset(named & self.special_ids)

    def naming(self, named: frozenset[int]) -> Vocabulary:
        """The vocabulary that lets ``named`` (a subset of the special tokens) back into text."""
        if not named:
            return self._default
        with self._naming_lock:
            vocabulary = self._naming.pop(named, None) or self._new_vocabulary(named)
            self._naming[named] = vocabulary
            if len(self._naming) > _NAMING_VOCABULARIES:
                self._naming.popitem(last=False)  # its grammars keep their own reference
            return vocabulary

    def _new_vocabulary(self, named: frozenset[int]) -> Vocabulary:
        info = self._tokenizer_info
        if self.special_ids:
            blank = self.special_ids - named
            info = xgr.TokenizerInfo(
                [b"" if token in blank else text for token, text in enumerate(self._texts)],
                xgr.VocabType.RAW,
                vocab_size=info.vocab_size,
                stop_token_ids=list(info.stop_token_ids),
                add_prefix_space=info.add_prefix_space,
            )
        # Caching is ours (keyed by GrammarSpec); xgrammar's own cache would
        # hold a second, unbounded-by-us copy of every grammar.
        compiler = xgr.GrammarCompiler(info, max_threads=self._compile_threads, cache_enabled=False)
        return Vocabulary(info, compiler)


def _tag_tokens(tag: Any) -> tuple[set[int], list[str]]:
    """The token ids a structural tag names, and the texts it writes out."""
    ids: set[int] = set()
    texts: list[str] = []
    pending = [tag]
    while pending:
        node = pending.pop()
        if isinstance(node, str):
            texts.append(node)
        elif isinstance(node, list):
            pending.extend(node)
        elif isinstance(node, dict):
            refs = [node.get("token"), *(node.get("trigger_tokens") or ())]
            if node.get("type") == "token_dispatch":
                refs.extend(rule[0] for rule in node.get("rules") or () if rule)
            ids.update(r for r in refs if isinstance(r, int) and not isinstance(r, bool))
            pending.extend(value for key, value in node.items() if key not in _NOT_WRITTEN)
    return ids, texts
