import math
import random

import pytest
import torch

from trl_entropy.losses import (
    clip_cov_selection,
    kl_cov_selection,
    kl_cov_threshold,
    masked_sums,
    means_from_sums,
    selection_quota,
    token_covariance,
)

# Hand case used throughout: valid tokens (0,0), (0,1), (1,0).
#   A:    1, 1, -2      -> mean 0
#   logp: -1, -2, -3    -> mean -2
#   cov:  (1)(1)=1, (1)(0)=0, (-2)(-1)=2
LOGPS = torch.tensor([[-1.0, -2.0, -9.0], [-3.0, -9.0, -9.0]])
ADV = torch.tensor([1.0, -2.0])
MASK = torch.tensor([[1, 1, 0], [1, 0, 0]])
COV = [[1.0, 0.0, 0.0], [2.0, 0.0, 0.0]]


@pytest.mark.parametrize("adv", [ADV, ADV[:, None], ADV[:, None].expand(2, 3).clone()])
def test_token_covariance_hand_case_all_advantage_shapes(adv):
    cov = token_covariance(LOGPS, adv, MASK)
    assert cov.shape == (2, 3)
    assert cov.tolist() == COV


def test_token_covariance_gradient_flows_through_logps_only_not_through_means():
    lp = LOGPS.clone().requires_grad_(True)
    token_covariance(lp, ADV, MASK).sum().backward()
    # d/dlogp of (A - mean A)(logp - mean(logp.detach())) = (A - mean A) on valid tokens, 0 on padding
    assert lp.grad.tolist() == [[1.0, 1.0, 0.0], [-2.0, 0.0, 0.0]]


def test_token_covariance_with_given_stats():
    cov = token_covariance(LOGPS, ADV, MASK, stats=(0.5, -1.0))
    # (1-0.5)(-1+1)=0, (1-0.5)(-2+1)=-0.5, (-2-0.5)(-3+1)=5
    assert cov.tolist() == [[0.0, -0.5, 0.0], [5.0, 0.0, 0.0]]
    cov_t = token_covariance(LOGPS, ADV, MASK, stats=(torch.tensor(0.5), torch.tensor(-1.0)))
    assert torch.equal(cov, cov_t)


def test_masked_sums_and_means_hand_case():
    sums = masked_sums(LOGPS, ADV, MASK)
    assert sums.tolist() == [0.0, -6.0, 3.0]
    assert means_from_sums(sums) == (0.0, -2.0)


def test_global_scope_from_summed_micro_batches_equals_full_batch():
    g = torch.Generator().manual_seed(0)
    lp = -torch.rand(6, 5, generator=g) * 3
    adv = torch.randn(6, generator=g)
    mask = (torch.rand(6, 5, generator=g) > 0.3).int()
    full = token_covariance(lp, adv, mask)
    total = masked_sums(lp[:2], adv[:2], mask[:2]) + masked_sums(lp[2:], adv[2:], mask[2:])  # the "all-reduce"
    stats = means_from_sums(total)
    parts = torch.cat([token_covariance(lp[:2], adv[:2], mask[:2], stats=stats),
                       token_covariance(lp[2:], adv[2:], mask[2:], stats=stats)])
    assert torch.allclose(parts, full, atol=1e-6)
    # local means differ from global ones in general (the per-micro-batch scope of the reference)
    assert not torch.allclose(token_covariance(lp[:2], adv[:2], mask[:2]), full[:2], atol=1e-4)


def test_token_covariance_matches_direct_python_recomputation():
    rng = random.Random(42)
    b, t = 5, 7
    lp = [[-rng.uniform(0, 5) for _ in range(t)] for _ in range(b)]
    adv = [rng.gauss(0, 1) for _ in range(b)]
    mask = [[int(rng.random() > 0.35) for _ in range(t)] for _ in range(b)]
    valid = [(i, j) for i in range(b) for j in range(t) if mask[i][j]]
    mean_a = sum(adv[i] for i, _ in valid) / len(valid)
    mean_l = sum(lp[i][j] for i, j in valid) / len(valid)
    expected = [[(adv[i] - mean_a) * (lp[i][j] - mean_l) if mask[i][j] else 0.0 for j in range(t)] for i in range(b)]
    got = token_covariance(torch.tensor(lp, dtype=torch.float64), torch.tensor(adv, dtype=torch.float64),
                           torch.tensor(mask))
    assert got.dtype == torch.float64
    assert torch.allclose(got, torch.tensor(expected, dtype=torch.float64), atol=1e-12)


def test_token_covariance_edge_cases_are_finite():
    # empty mask -> all zeros
    empty = torch.zeros(2, 3)
    assert token_covariance(LOGPS, ADV, empty).tolist() == [[0.0] * 3] * 2
    assert masked_sums(LOGPS, ADV, empty).tolist() == [0.0, 0.0, 0.0]
    assert means_from_sums(masked_sums(LOGPS, ADV, empty)) == (0.0, 0.0)
    # single valid token -> 0 (it equals both means)
    single = torch.tensor([[0, 1, 0], [0, 0, 0]])
    assert token_covariance(LOGPS, ADV, single).tolist() == [[0.0] * 3] * 2
    # all-masked row, zero advantages, non-finite values on padding
    lp = torch.tensor([[-1.0, float("-inf"), float("nan")], [float("nan"), -2.0, -3.0]])
    mask = torch.tensor([[1, 0, 0], [0, 0, 0]])
    cov = token_covariance(lp, torch.zeros(2), mask)
    assert torch.isfinite(cov).all() and cov.abs().sum() == 0
    cov = token_covariance(lp, torch.tensor([1.0, 3.0]), torch.tensor([[1, 0, 0], [0, 1, 1]]))
    assert torch.isfinite(cov).all()
    # A = (1, 3), logp = (-1, -2, -3) on valid tokens: means 7/3 and -2
    assert torch.allclose(cov, torch.tensor([[(1 - 7 / 3) * 1.0, 0, 0], [0, (3 - 7 / 3) * 0.0, (3 - 7 / 3) * -1.0]]))


def test_token_covariance_validation():
    with pytest.raises(ValueError, match="advantages"):
        token_covariance(LOGPS, torch.zeros(3), MASK)
    with pytest.raises(ValueError, match="logps"):
        token_covariance(LOGPS[:, :2], ADV, MASK)
    with pytest.raises(ValueError, match="mask"):
        token_covariance(LOGPS, ADV, MASK[0])
    with pytest.raises(ValueError, match="stats"):
        token_covariance(LOGPS, ADV, MASK, stats=(0.0,))
    with pytest.raises(ValueError, match="stats"):
        token_covariance(LOGPS, ADV, MASK, stats=(0.0, math.nan))
    with pytest.raises(ValueError, match="sums"):
        means_from_sums(torch.zeros(2))


@pytest.mark.parametrize(
    "ratio, n, k", [(0.002, 1000, 2), (0.0002, 1000, 1), (0.5, 0, 1), (1.0, 7, 7), (0.3, 10, 3), (0.0, 50, 1)]
)
def test_selection_quota_rule(ratio, n, k):
    assert selection_quota(ratio, n) == k == max(1, int(ratio * n))


def test_kl_cov_selection_hand_case_and_k_rule():
    cov = torch.tensor(COV)
    # n_valid = 3: ratio 0.5 -> max(1, int(1.5)) = 1 ; 0.7 -> int(2.1) = 2 ; 0 -> 1 ; 1 -> 3
    assert kl_cov_selection(cov, MASK, 0.5).tolist() == [[False, False, False], [True, False, False]]
    assert kl_cov_selection(cov, MASK, 0.7).tolist() == [[True, False, False], [True, False, False]]
    assert kl_cov_selection(cov, MASK, 0.0).sum() == 1
    assert kl_cov_selection(cov, MASK, 1.0).tolist() == [[True, True, False], [True, False, False]]


def test_kl_cov_selection_ties_break_by_flat_index():
    cov = torch.tensor([[1.0, 3.0], [3.0, 3.0]])
    mask = torch.ones(2, 2)
    assert kl_cov_selection(cov, mask, 0.5).tolist() == [[False, True], [True, False]]  # k = 2 of three 3.0s
    zero = torch.zeros(3, 4)  # zero-advantage batch: all covariances 0, still k tokens, the first ones
    sel = kl_cov_selection(zero, torch.ones(3, 4), 0.25)
    assert sel.reshape(-1).nonzero().flatten().tolist() == [0, 1, 2]


def test_kl_cov_selection_ignores_padding_and_edge_cases():
    cov = torch.tensor([[0.0, 100.0], [-math.inf, 50.0]])
    mask = torch.tensor([[1, 0], [1, 0]])
    assert kl_cov_selection(cov, mask, 0.1).tolist() == [[True, False], [False, False]]
    assert kl_cov_selection(cov, mask, 1.0).tolist() == [[True, False], [True, False]]  # -inf allowed, ranked last
    assert not kl_cov_selection(cov, torch.zeros(2, 2), 0.5).any()  # empty mask
    single = torch.tensor([[0, 0], [0, 1]])
    assert kl_cov_selection(cov, single, 0.001).tolist() == [[False, False], [False, True]]
    assert kl_cov_selection(cov, single, 0.5, k=10).sum() == 1  # capped at n_valid
    assert not kl_cov_selection(cov, mask, 0.5, k=0).any()
    with pytest.raises(ValueError, match="NaN"):
        kl_cov_selection(torch.tensor([[math.nan, 0.0]]), torch.ones(1, 2), 0.5)
    with pytest.raises(ValueError, match="ratio"):
        kl_cov_selection(cov, mask, 1.5)
    with pytest.raises(ValueError, match="k must"):
        kl_cov_selection(cov, mask, 0.5, k=-1)
    with pytest.raises(ValueError, match="cov"):
        kl_cov_selection(cov[:1], mask, 0.5)


def test_kl_cov_threshold_hand_case_and_global_equivalence():
    v = torch.tensor([3.0, 1.0, 2.0, 2.0])
    assert kl_cov_threshold(v, 1) == 3.0
    assert kl_cov_threshold(v, 2) == 2.0 and kl_cov_threshold(v, 3) == 2.0
    assert kl_cov_threshold(v, 10) == 1.0
    assert kl_cov_threshold(v, 0) == math.inf and kl_cov_threshold(torch.zeros(0), 3) == math.inf
    with pytest.raises(ValueError, match="1-D"):
        kl_cov_threshold(v[None], 1)
    # global top-k via the threshold equals a single top-k over the concatenated micro-batches
    g = torch.Generator().manual_seed(1)
    cov, mask = torch.randn(8, 6, generator=g), (torch.rand(8, 6, generator=g) > 0.3)
    k = selection_quota(0.1, int(mask.sum()))
    thr = kl_cov_threshold(cov[mask], k)
    via_thr = (cov >= thr) & mask
    assert via_thr.sum() == k
    assert torch.equal(via_thr, kl_cov_selection(cov, mask, 0.1))


def test_clip_cov_strict_bounds_and_fewer_candidates_than_quota():
    cov = torch.tensor([[1.0, 5.0, 3.0, 0.5, 4.9]])
    mask = torch.ones(1, 5)
    sel = clip_cov_selection(cov, mask, 1.0, 1.0, 5.0, torch.Generator().manual_seed(0))
    assert sel.tolist() == [[False, False, True, False, True]]  # 1.0 and 5.0 excluded (strict)


def test_clip_cov_quota_and_only_valid_tokens():
    cov = torch.full((4, 5), 2.0)
    mask = torch.ones(4, 5)
    mask[3] = 0  # all-masked row: 15 valid tokens, ratio 0.2 -> quota 3
    for seed in range(20):
        sel = clip_cov_selection(cov, mask, 0.2, 1.0, 5.0, torch.Generator().manual_seed(seed))
        assert sel.sum() == 3 and not sel[3].any()
    sel = clip_cov_selection(cov, mask, 0.0002, 1.0, 5.0, torch.Generator().manual_seed(0))
    assert sel.sum() == 1  # max(1, int(0.003))
    assert clip_cov_selection(cov, mask, 0.2, 1.0, 5.0, torch.Generator().manual_seed(0), k=7).sum() == 7
    assert not clip_cov_selection(cov, mask, 0.2, 1.0, 5.0, torch.Generator().manual_seed(0), k=0).any()


def test_clip_cov_no_candidates_or_empty_mask():
    cov = torch.tensor([[0.0, 10.0], [math.inf, -math.inf]])
    assert not clip_cov_selection(cov, torch.ones(2, 2), 0.5, 1.0, 5.0).any()
    assert not clip_cov_selection(torch.full((2, 2), 2.0), torch.zeros(2, 2), 0.5, 1.0, 5.0).any()
    single = torch.tensor([[0, 1], [0, 0]])
    sel = clip_cov_selection(torch.full((2, 2), 2.0), single, 0.5, 1.0, 5.0)
    assert sel.tolist() == [[False, True], [False, False]]


def test_clip_cov_deterministic_given_seed_and_varies_with_seed():
    g = torch.Generator().manual_seed(3)
    cov = torch.rand(6, 8, generator=g) * 4 + 0.5
    mask = torch.rand(6, 8, generator=g) > 0.2
    a = clip_cov_selection(cov, mask, 0.1, 1.0, 4.0, torch.Generator().manual_seed(11))
    b = clip_cov_selection(cov, mask, 0.1, 1.0, 4.0, torch.Generator().manual_seed(11))
    assert torch.equal(a, b)
    others = [clip_cov_selection(cov, mask, 0.1, 1.0, 4.0, torch.Generator().manual_seed(s)) for s in range(5)]
    assert any(not torch.equal(a, o) for o in others)
    assert not (a & ~mask).any() and (cov[a] > 1.0).all() and (cov[a] < 4.0).all()


def test_clip_cov_is_uniform_over_candidates():
    cov = torch.tensor([[2.0, 2.0, 9.0, 2.0, 2.0]])
    mask = torch.ones(1, 5)  # quota max(1, int(0.1 * 5)) = 1 among the 4 candidates
    g = torch.Generator().manual_seed(5)
    draws = 4000
    counts = sum(clip_cov_selection(cov, mask, 0.1, 1.0, 5.0, g).int() for _ in range(draws))[0].tolist()
    assert counts[2] == 0 and sum(counts) == draws
    se = math.sqrt(draws * 0.25 * 0.75)  # binomial standard error of each count (~27)
    assert all(abs(counts[j] - draws / 4) <= 4 * se for j in (0, 1, 3, 4)), counts


def test_clip_cov_global_mode_matches_single_call_and_splits_exactly():
    g = torch.Generator().manual_seed(8)
    cov = torch.rand(8, 6, generator=g) * 6
    mask = torch.rand(8, 6, generator=g) > 0.25
    cand = mask & (cov > 1.0) & (cov < 5.0)
    total, k = int(cand.sum()), 5
    single = clip_cov_selection(cov, mask, 0.1, 1.0, 5.0, torch.Generator().manual_seed(4), k=k)
    glob = clip_cov_selection(cov, mask, 0.1, 1.0, 5.0, torch.Generator().manual_seed(4), k=k,
                              candidate_offset=0, total_candidates=total)
    assert torch.equal(single, glob) and glob.sum() == k
    # two shards (micro-batches / processes), candidates numbered rank-major: the union is the global draw
    n0 = int(cand[:3].sum())
    s0 = clip_cov_selection(cov[:3], mask[:3], 0.1, 1.0, 5.0, torch.Generator().manual_seed(4), k=k,
                            candidate_offset=0, total_candidates=total)
    s1 = clip_cov_selection(cov[3:], mask[3:], 0.1, 1.0, 5.0, torch.Generator().manual_seed(4), k=k,
                            candidate_offset=n0, total_candidates=total)
    assert torch.equal(torch.cat([s0, s1]), glob)
    with pytest.raises(ValueError, match="k is required"):
        clip_cov_selection(cov, mask, 0.1, 1.0, 5.0, total_candidates=total)
    with pytest.raises(ValueError, match="exceeds total_candidates"):
        clip_cov_selection(cov, mask, 0.1, 1.0, 5.0, k=1, candidate_offset=1, total_candidates=total)


@pytest.mark.parametrize(
    "kw, match",
    [
        (dict(lb=5.0, ub=5.0), "lb must be < ub"),
        (dict(lb=6.0, ub=5.0), "lb must be < ub"),
        (dict(ratio=-0.1), "ratio"),
        (dict(ratio=1.1), "ratio"),
        (dict(k=-2), "k must"),
        (dict(generator="seed"), "generator"),
    ],
)
def test_clip_cov_validation(kw, match):
    args = dict(ratio=0.1, lb=1.0, ub=5.0)
    args.update(kw)
    with pytest.raises(ValueError, match=match):
        clip_cov_selection(torch.zeros(2, 2), torch.ones(2, 2), **args)


def test_end_to_end_selection_on_covariance_has_no_nan():
    lp = torch.tensor([[-0.1, -5.0, -0.2, -3.0], [-1.0, -2.0, -0.5, float("nan")]])
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0]])
    for adv in (torch.zeros(2), torch.tensor([1.0, -1.0])):
        cov = token_covariance(lp, adv, mask)
        assert torch.isfinite(cov).all()
        assert kl_cov_selection(cov, mask, 0.3).sum() == 2
        assert not (clip_cov_selection(cov, mask, 0.3, -1.0, 1.0) & ~mask.bool()).any()
