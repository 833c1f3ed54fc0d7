"""A compiled grammar survives serialisation, and only loads where it belongs."""

from __future__ import annotations

import pickle

import pytest
import xgrammar as xgr
from unit_tests.conftest import COMPACT, EOS, VOCAB, SmallTokenizer

from grammar_guard.core.compile.in_thread import InThreadCompiler
from grammar_guard.core.engines.xgrammar.engine import XGrammarEngine
from grammar_guard.core.request.spec import RequestKind

SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string", "maxLength": 3}, "n": {"type": "integer"}},
    "required": ["name", "n"],
}


def _matches(engine: XGrammarEngine, compiled: object, text: str) -> bool:
    matcher = engine.new_matcher(compiled, stop_token_ids=None, max_rollback_tokens=0)  # type: ignore[arg-type]
    ids = [VOCAB.index(char) for char in text] + [VOCAB.index(EOS)]
    return all(matcher.accept_token(token) for token in ids) and matcher.is_terminated()


def test_a_loaded_grammar_enforces_what_the_compiled_one_did(small: SmallTokenizer) -> None:
    spec = small.spec(RequestKind.JSON_SCHEMA, SCHEMA, COMPACT)
    loaded = small.engine.deserialize(small.engine.serialize(small.engine.compile(spec)))
    assert _matches(small.engine, loaded, '{"name":"ab","n":7}')
    assert not _matches(small.engine, loaded, '{"name":"abcd","n":7}')
    assert not _matches(small.engine, loaded, '{"name": "ab","n":7}')


def test_a_recipe_builds_an_equal_engine_in_another_process(small: SmallTokenizer) -> None:
    rebuilt = pickle.loads(pickle.dumps(small.engine.recipe())).build()
    assert rebuilt.fingerprint == small.engine.fingerprint
    assert rebuilt.vocab_size == small.engine.vocab_size
    spec = small.spec(RequestKind.REGEX, "[a-c]+")
    loaded = small.engine.deserialize(rebuilt.serialize(rebuilt.compile(spec)))
    assert _matches(small.engine, loaded, "abc")
    assert not _matches(small.engine, loaded, "abd")


def test_another_vocabulary_of_the_same_size_has_another_fingerprint(
    small: SmallTokenizer,
) -> None:
    swapped = list(VOCAB)
    swapped[0], swapped[1] = swapped[1], swapped[0]
    info = xgr.TokenizerInfo(encoded_vocab=swapped, stop_token_ids=[VOCAB.index(EOS)])
    other = XGrammarEngine(info, compile_threads=1)
    assert other.vocab_size == small.engine.vocab_size
    assert other.fingerprint != small.engine.fingerprint


@pytest.mark.parametrize(
    "data",
    [b"", b"\xff\xfe\x00", b"{}", b'{"grammar": 1}', b"not json at all"],
    ids=["empty", "not-utf8", "empty-object", "foreign-object", "text"],
)
def test_data_that_is_no_compiled_grammar_is_refused_with_value_error(
    small: SmallTokenizer, data: bytes
) -> None:
    with pytest.raises(ValueError, match="not a compiled grammar"):
        small.engine.deserialize(data)


def test_a_truncated_grammar_is_refused(small: SmallTokenizer) -> None:
    blob = small.engine.serialize(small.engine.compile(small.spec(RequestKind.REGEX, "a+")))
    with pytest.raises(ValueError, match="not a compiled grammar"):
        small.engine.deserialize(blob[: len(blob) // 2])


def test_the_in_thread_compiler_compiles_with_its_engine(small: SmallTokenizer) -> None:
    result = InThreadCompiler(small.engine).compile(small.spec(RequestKind.REGEX, "yes|no"))
    assert result.serialized is None
    assert _matches(small.engine, result.compiled, "no")
