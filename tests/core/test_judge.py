"""Judge math on hand-written logprobs (SpecCompact eq. 3 and the missing-label rule)."""

import math

import pytest

from sgl_speccompact.errors import LabelLogprobError, LabelTokenError
from sgl_speccompact.core.judge import (LabelTokens, acceptance_score, judge_next_token, label_variants,
                                   missing_label_substitute, resolve_label_tokens)

LABELS = LabelTokens(positive=(11, 12, 13), negative=(21, 22))
ln = math.log


def test_best_variant_per_label_is_used():
    lp = {11: ln(0.10), 12: ln(0.50), 13: ln(0.05), 21: ln(0.20), 22: ln(0.01)}
    j = judge_next_token(lp, None, LABELS, eta=0.7)
    assert j.p_pos == pytest.approx(0.50) and j.p_neg == pytest.approx(0.20)
    assert j.score == pytest.approx(0.5 / 0.7) and j.accepted


def test_threshold_is_inclusive_and_rejects_below():
    assert judge_next_token({11: ln(0.7), 21: ln(0.3)}, None, LABELS, eta=0.7).accepted
    assert not judge_next_token({11: ln(0.69), 21: ln(0.31)}, None, LABELS, eta=0.7).accepted


def test_no_mass_on_either_label_rejects():
    j = judge_next_token({11: float("-inf"), 21: float("-inf")}, None, LABELS, eta=0.7)
    assert j.score == 0.0 and not j.accepted
    assert acceptance_score(0.0, 0.0) == 0.0


def test_a_label_without_any_logprob_is_an_error_not_a_default():
    # a server that ignores token_ids_logprob returns nothing for the labels: before, this
    # read as p = 0 for both and rejected every line silently
    with pytest.raises(LabelLogprobError, match="positive"):
        judge_next_token({}, None, LABELS, eta=0.7)
    with pytest.raises(LabelLogprobError, match="negative"):
        judge_next_token({11: ln(0.9), 21: None}, None, LABELS, eta=0.7)


def test_missing_exact_labels_fall_back_to_the_top_k_rule():
    j = judge_next_token({11: None, 21: None}, [(12, ln(0.6)), (99, ln(0.3))], LABELS, eta=0.7)
    assert j.p_pos == pytest.approx(0.6) and j.p_neg == pytest.approx(0.1)
    assert j.substituted == ("negative",) and j.accepted


def test_missing_label_substitute_is_min_of_rest_and_smallest():
    assert missing_label_substitute([0.5, 0.3, 0.05]) == pytest.approx(0.05)  # rest 0.15 > 0.05
    assert missing_label_substitute([0.6, 0.35]) == pytest.approx(0.05)  # rest 0.05 < 0.35
    assert missing_label_substitute([0.7, 0.3]) == 0.0  # no mass left
    assert missing_label_substitute([]) == 0.0


def test_top_k_with_missing_negative():
    top = [(12, ln(0.6)), (99, ln(0.3))]  # negative not returned; rest = 0.1 < 0.3
    j = judge_next_token(None, top, LABELS, eta=0.7)
    assert j.p_neg == pytest.approx(0.1) and j.substituted == ("negative",)
    assert j.score == pytest.approx(0.6 / 0.7) and j.accepted


def test_top_k_with_missing_positive_rejects():
    top = [(21, ln(0.8)), (99, ln(0.15))]  # positive missing: min(0.05, 0.15)
    j = judge_next_token(None, top, LABELS, eta=0.7)
    assert j.p_pos == pytest.approx(0.05) and j.substituted == ("positive",) and not j.accepted


def test_top_k_uses_best_returned_variant():
    top = [(11, ln(0.2)), (13, ln(0.4)), (22, ln(0.3))]
    j = judge_next_token(None, top, LABELS, eta=0.5)
    assert j.p_pos == pytest.approx(0.4) and j.p_neg == pytest.approx(0.3) and j.substituted == ()


def test_label_resolution_skips_multi_token_variants():
    vocab = {"positive": [1], " positive": [2], "Positive": [3, 4], "negative": [5]}
    labels = resolve_label_tokens("positive", "negative", lambda t: vocab.get(t, [7, 8]))
    assert labels == LabelTokens((1, 2), (5,))


def test_label_without_single_token_variant_is_a_startup_error():
    with pytest.raises(LabelTokenError, match="affirmative"):
        resolve_label_tokens("affirmative", "negative",
                             lambda t: [5] if t == "negative" else [1, 2])


def test_labels_sharing_a_token_are_rejected():
    with pytest.raises(LabelTokenError):
        resolve_label_tokens("yes", "no", lambda t: [1])


def test_variants_are_case_and_space_forms():
    assert label_variants("Yes") == ["Yes", " Yes", "YES", " YES"]
