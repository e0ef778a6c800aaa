"""Loop specs: strict parsing, and iterate() against plain nested loops."""
import itertools
from collections import Counter

import pytest
from hypothesis import given, settings, strategies as st

from brgemm.loopspec import Level, Loop, Nest, SpecError, parse_spec

A, B, C = Loop("a", 0, 8, 2, blocks=(4,)), Loop("b", 0, 3, 1), Loop("c", 1, 7, 3)
LOOPS = [A, B, C]


def tuples(nest, names="abc"):
    return [tuple(d[n] for n in names) for d in nest.iterate()]


# --- Loop ---------------------------------------------------------------------

@pytest.mark.parametrize("kwargs, words", [
    (dict(name="ab", start=0, stop=4, step=1), "'ab'"),
    (dict(name="A", start=0, stop=4, step=1), "'A'"),
    (dict(name="a", start=0, stop=4, step=0), "step 0"),
    (dict(name="a", start=0, stop=4, step=-1), "step -1"),
    (dict(name="a", start=0, stop=4.0, step=1), "stop 4.0"),
    (dict(name="a", start=0, stop=8, step=2, blocks=(3,)), "block 3"),
    (dict(name="a", start=0, stop=8, step=2, blocks=(4, 0)), "block 0"),
    (dict(name="a", start=0, stop=8, step=2, blocks=(-4,)), "block -4"),
    (dict(name="a", start=0, stop=8, step=2, blocks=(True,)), "block True"),
])
def test_loop_rejects(kwargs, words):
    with pytest.raises(ValueError, match=words):
        Loop(**kwargs)


def test_loop_block_error_names_loop():
    with pytest.raises(ValueError, match=r"loop 'q': block 6 is not a positive multiple of step 4"):
        Loop("q", 0, 16, 4, blocks=(6,))


# --- parsing: the good cases ---------------------------------------------------

def test_levels_steps_and_depths():
    nest = parse_spec("aBca", LOOPS)
    assert nest.levels == (Level("a", 0, 4, False), Level("b", 0, 1, True),
                           Level("c", 0, 3, False), Level("a", 1, 2, False))
    assert nest.barriers == () and nest.spec == "aBca"
    assert nest.parallel_levels() == (1,)
    assert nest.phases() == (range(0, 4),)


def test_loops_as_dict():
    assert parse_spec("aBca", {lp.name: lp for lp in LOOPS}) == parse_spec("aBca", LOOPS)


def test_collapsed_region_and_barriers():
    nest = parse_spec("AB|ca", [A, B, Loop("c", 0, 3, 1)])
    assert nest.parallel_levels() == (0, 1)
    assert nest.barriers == (1,)
    assert nest.phases() == (range(0, 2), range(2, 4))


def test_one_parallel_region_per_phase():
    loops = [Loop("a", 0, 4, 1, (2,)), Loop("b", 0, 4, 1, (2,))]
    nest = parse_spec("Ab|Ba", loops)          # a region in each phase is fine
    assert nest.parallel_levels() == (0, 2)
    assert nest.barriers == (1,)
    assert nest.phases() == (range(0, 2), range(2, 4))
    nest = parse_spec("a|b|AB", loops)
    assert nest.barriers == (0, 1) and nest.parallel_levels() == (2, 3)
    assert nest.phases() == (range(0, 1), range(1, 2), range(2, 4))


def test_blocked_loop_parallel_at_inner_level():
    nest = parse_spec("aA", [Loop("a", 0, 8, 1, (4,))])
    assert nest.levels == (Level("a", 0, 4, False), Level("a", 1, 1, True))


# --- parsing: every error names the character and its position ----------------

@pytest.mark.parametrize("spec, message", [
    ("aBcz", "spec 'aBcz': position 3: 'z' is not a declared loop (declared: a, b, c)"),
    ("aBcaD", "position 4: 'D' is not a declared loop"),
    ("a1bca", "position 1: '1' is not a loop letter or '|'"),
    ("ab ca", "position 2: ' ' is not a loop letter or '|'"),
    ("ab\tca", "position 2: '\\t' is not"),
    ("abcaé", "position 4: 'é' is not a loop letter"),
    ("|abca", "position 0: '|' with no loop before it"),
    ("abca|", "position 4: '|' with no loop after it"),
    ("ab||ca", "position 3: '|' right after '|'"),
    ("abcab", "position 4: 'b': loop 'b' has 0 block size(s), so it must appear exactly 1 time"),
    ("abcaa", "position 4: 'a': loop 'a' has 1 block size(s), so it must appear exactly 2 time"),
    ("abc", "position 3: (end of spec) loop 'a' appears 1 time(s)"),
    ("aba", "position 3: (end of spec) loop 'c' appears 0 time(s)"),
    ("AbCa", "position 2: 'C' starts a second parallel region in phase 0"),
    ("a|BcA", "position 4: 'A' starts a second parallel region in phase 1"),
])
def test_spec_errors(spec, message):
    with pytest.raises(SpecError) as e:
        parse_spec(spec, LOOPS)
    assert message in str(e.value)
    assert isinstance(e.value, ValueError)


def test_empty_spec():
    with pytest.raises(SpecError, match="empty"):
        parse_spec("", LOOPS)


def test_bad_declarations():
    with pytest.raises(ValueError, match="declared twice"):
        parse_spec("a", [Loop("a", 0, 1, 1), Loop("a", 0, 2, 1)])
    with pytest.raises(ValueError, match="key and name differ"):
        parse_spec("a", {"b": Loop("a", 0, 1, 1)})


# --- iterate() ------------------------------------------------------------------

@pytest.mark.parametrize("start, stop, step, blocks", [
    (0, 10, 1, ()), (0, 10, 3, ()), (0, 10, 2, (4,)), (3, 17, 2, (6, 4)),
    (0, 100, 3, (27, 9)), (5, 5, 1, (2,)), (0, 7, 1, (8, 4, 2)), (0, 12, 2, (6, 4)),
])
def test_single_loop_visits_its_range_in_order(start, stop, step, blocks):
    loop = Loop("x", start, stop, step, blocks)
    nest = parse_spec("x" * (len(blocks) + 1), [loop])
    assert [d["x"] for d in nest.iterate()] == list(range(start, stop, step))


def test_remainder_blocks_are_short():
    # 0..9 by 4-blocks of 1: the last block holds 8, 9 only.
    nest = parse_spec("aa", [Loop("a", 0, 10, 1, (4,))])
    assert [d["a"] for d in nest.iterate()] == list(range(10))
    nest = parse_spec("ab", [Loop("a", 0, 10, 4), Loop("b", 0, 3, 2)])
    assert tuples(nest, "ab") == [(0, 0), (0, 2), (4, 0), (4, 2), (8, 0), (8, 2)]


def test_order_is_nested_loop_order():
    loops = [Loop("a", 0, 3, 1), Loop("b", 0, 2, 1)]
    ab = tuples(parse_spec("ab", loops), "ab")
    ba = tuples(parse_spec("ba", loops), "ab")
    assert ab == [(a, b) for a in range(3) for b in range(2)]
    assert ba == [(a, b) for b in range(2) for a in range(3)]
    assert ab != ba and sorted(ab) == sorted(ba)


def test_blocked_order_matches_hand_written_loops():
    got = tuples(parse_spec("aBca", LOOPS))
    want = [(a1, b, c)
            for a0 in range(0, 8, 4) for b in range(0, 3) for c in range(1, 7, 3)
            for a1 in range(a0, min(a0 + 4, 8), 2)]
    assert got == want


def test_all_specs_same_set_different_orders():
    product = sorted(itertools.product(range(0, 8, 2), range(3), range(1, 7, 3)))
    orders = set()
    for perm in set(itertools.permutations("aabc")):
        got = tuples(parse_spec("".join(perm), LOOPS))
        assert sorted(got) == product
        orders.add(tuple(got))
    assert len(orders) > 1


def test_parallel_and_barriers_do_not_change_order():
    assert tuples(parse_spec("a|Bca", LOOPS)) == tuples(parse_spec("abca", LOOPS))


def test_iterate_yields_fresh_dicts():
    nest = parse_spec("a", [Loop("a", 0, 3, 1)])
    assert list(nest.iterate()) == [{"a": 0}, {"a": 1}, {"a": 2}]


# --- fuzz: random loops and specs cover exactly the product of their ranges --------

@st.composite
def loops_and_spec(draw):
    names = draw(st.lists(st.sampled_from("abcdwxyz"), min_size=1, max_size=3, unique=True))
    loops, letters = [], []
    for name in names:
        start = draw(st.integers(-5, 5))
        stop = start + draw(st.integers(0, 12))
        step = draw(st.integers(1, 4))
        blocks = tuple(step * draw(st.integers(1, 5)) for _ in range(draw(st.integers(0, 2))))
        loops.append(Loop(name, start, stop, step, blocks))
        letters += [draw(st.sampled_from([name, name.upper()])) for _ in range(len(blocks) + 1)]
    letters = draw(st.permutations(letters))
    # Keep at most one parallel region: lower-case every upper letter after the first run.
    spec, seen_region = "", False
    for i, ch in enumerate(letters):
        if ch.isupper() and seen_region and not spec[-1:].isupper():
            ch = ch.lower()
        seen_region |= ch.isupper()
        spec += ch
    return loops, spec


@settings(max_examples=200, deadline=None)
@given(loops_and_spec())
def test_fuzz_visits_full_product_once(case):
    loops, spec = case
    nest = parse_spec(spec, loops)
    names = [lp.name for lp in loops]
    got = Counter(tuple(d[n] for n in names) for d in nest.iterate())
    want = Counter(itertools.product(*(range(lp.start, lp.stop, lp.step) for lp in loops)))
    assert got == want
    assert len(nest.levels) == len(spec)
    assert all(lv.parallel == spec[i].isupper() for i, lv in enumerate(nest.levels))


@settings(max_examples=100, deadline=None)
@given(st.text(alphabet="abcABCxz|1 ", max_size=8))
def test_fuzz_garbage_is_spec_error_or_valid(spec):
    try:
        nest = parse_spec(spec, LOOPS)
    except SpecError as e:
        assert str(e).startswith(f"spec {spec!r}:")
    else:
        assert isinstance(nest, Nest) and len(nest.levels) == 4
