"""The method on seeded tiny inputs: schedule, gate, mask statistics, e_bar, baselines."""

import math

import pytest
import torch

from entrodrop.method.dropout import (
    EmbeddingHook,
    TokenDropoutPlan,
    add_hidden_dropout,
    auto_midpoint,
    draw_gamma,
    drop_mask,
    entropy_gate,
    gamma_max_at,
    mean_embedding,
    midpoint_step,
    neftune_noise,
    perturb_embeddings,
    plan_perturbation,
    row_generator,
)
from entrodrop.models.qwen3._component_builders import qwen3

NAN = float("nan")


def test_schedule_values_at_chosen_steps():
    assert gamma_max_at(0, 0.1, "sigmoid", sharpness=0.1, midpoint=50) == pytest.approx(0.1 / (1 + math.exp(5)))
    assert gamma_max_at(50, 0.1, "sigmoid", sharpness=0.1, midpoint=50) == pytest.approx(0.05)
    assert gamma_max_at(100, 0.1, "sigmoid", sharpness=0.1, midpoint=50) == pytest.approx(0.1 / (1 + math.exp(-5)))
    assert gamma_max_at(10_000, 0.1, "sigmoid", sharpness=0.1, midpoint=50) == pytest.approx(0.1)
    assert gamma_max_at(0, 0.1, "static", sharpness=0.1, midpoint=50) == 0.1
    assert gamma_max_at(99, 0.1, "none", sharpness=0.1, midpoint=50) == 0.0


def test_gamma_is_uniform_below_its_bound():
    draws = [draw_gamma(0.2, row_generator(0, step, -1)) for step in range(4000)]
    assert all(0 <= d <= 0.2 for d in draws)
    assert sum(draws) / len(draws) == pytest.approx(0.1, abs=0.005)  # U(0, 0.2) has mean 0.1, sd 0.058


def packed_entropy(gen):
    """Two rows, each with two documents of different lengths; NaN first tokens, a general
    document (all NaN) and padding (NaN, id -1)."""
    h = torch.rand(2, 40, generator=gen) * 8
    docs = torch.tensor([[0] * 15 + [1] * 25, [0] * 22 + [1] * 10 + [-1] * 8])
    h[0, 0] = h[0, 15] = h[1, 0] = NAN
    h[1, 22:] = NAN  # document 1 of row 1 is general-domain, then padding
    return h, docs


def test_low_gate_is_the_bottom_of_each_document():
    h, docs = packed_entropy(torch.Generator().manual_seed(0))
    gate = entropy_gate(h, docs, 0.5, "low")
    assert not gate[torch.isnan(h)].any()
    for r, doc in [(0, 0), (0, 1), (1, 0)]:
        at = (docs[r] == doc) & ~torch.isnan(h[r])
        values, gated = h[r, at], gate[r, at]
        assert gated.sum() == at.sum() // 2
        assert values[gated].max() <= values[~gated].min()
    high = entropy_gate(h, docs, 0.3, "high")
    at = (docs[0] == 1) & ~torch.isnan(h[0])
    assert h[0, at][high[0, at]].min() >= h[0, at][~high[0, at]].max()
    assert torch.equal(entropy_gate(h, docs, 0.5, "random"), ~torch.isnan(h))


def ranked_gate(entropy, document_ids, gate_percentile, targeting):
    """The gate's rule written out: a loop over the documents of each row, ranking each one's
    tokens by (entropy, position) - highest entropy first for ``high`` - and gating the first
    floor(k * n)."""
    gate = torch.zeros_like(entropy, dtype=torch.bool)
    for r in range(entropy.shape[0]):
        has_entropy = ~torch.isnan(entropy[r])
        for doc in document_ids[r][has_entropy].unique():
            positions = torch.nonzero((document_ids[r] == doc) & has_entropy).flatten().tolist()
            sign = 1 if targeting == "low" else -1
            ranked = sorted(positions, key=lambda t: (sign * float(entropy[r, t]), t))
            quota = math.floor(round(gate_percentile * len(positions), 6))
            gate[r, ranked[:quota]] = True
    return gate


def test_gate_follows_the_ranking_rule_with_fp16_ties():
    gen = torch.Generator().manual_seed(4)
    for trial in range(600):
        b, s = int(torch.randint(1, 5, (1,), generator=gen)), int(torch.randint(1, 48, (1,), generator=gen))
        h = (torch.rand(b, s, generator=gen) * 4).half().float()  # fp16 values, as cached
        if trial % 2:
            h = (h * 2).round() / 2  # many ties at the threshold
        h[torch.rand(b, s, generator=gen) < 0.2] = NAN
        docs = torch.sort(torch.randint(0, 6, (b, s), generator=gen), dim=1).values
        p = (0.5, 0.25, 0.1, 1.0, 0.33, 0.7)[trial % 6]
        for targeting in ("low", "high"):
            assert torch.equal(entropy_gate(h, docs, p, targeting), ranked_gate(h, docs, p, targeting)), (trial, targeting)


@pytest.mark.parametrize("targeting", ["low", "high"])
def test_all_equal_entropies_gate_exactly_floor_k_n_earliest_first(targeting):
    # A random model's fp16 entropies: all equal. `H <= percentile` would gate every token.
    h = torch.full((3, 41), 11.9296875, dtype=torch.float16).float()
    h[:, 0] = NAN  # each row one document whose first token has no entropy: n = 40
    docs = torch.zeros(3, 41, dtype=torch.long)
    for k, expected in [(0.5, 20), (0.1, 4), (0.29, 11), (0.33, 13), (1.0, 40), (0.01, 0)]:
        gate = entropy_gate(h, docs, k, targeting)
        assert gate.sum(1).tolist() == [expected] * 3, k
        assert gate[:, 1:1 + expected].all(), "ties are not broken by position, earlier first"
    n = torch.full((1, 100), 3.0)
    assert int(entropy_gate(n, torch.zeros(1, 100, dtype=torch.long), 0.29, targeting).sum()) == 29  # not 28


def test_gate_counts_per_document_with_ties_at_the_percentile():
    # Two documents in one row; the second has ties straddling its median.
    h = torch.tensor([[NAN, 1.0, 2.0, 2.0, 2.0, 3.0, NAN, 5.0, 5.0, 1.0, 5.0]]).half().float()
    docs = torch.tensor([[0] * 6 + [1] * 5])
    # n = 5 and 4: two tokens each; of equal entropies the earlier is taken.
    assert entropy_gate(h, docs, 0.5, "low").int().tolist() == [[0, 1, 1, 0, 0, 0, 0, 1, 0, 1, 0]]
    assert entropy_gate(h, docs, 0.5, "high").int().tolist() == [[0, 0, 1, 0, 0, 1, 0, 1, 1, 0, 0]]


def test_drop_fraction_matches_expected_gamma_times_gated_fraction():
    gen = torch.Generator().manual_seed(1)
    h, docs = packed_entropy(gen)
    method = TokenDropoutPlan("low", 0.5, "static", gamma_max=0.2, sharpness=1.0, midpoint=0.0, midpoint_unit="steps", seed=3)
    gate = entropy_gate(h, docs, 0.5, "low")
    dropped, gated, steps = 0, int(gate.sum()), 3000
    for step in range(steps):
        drop, gamma_max_j, gamma = method.plan(h, docs, step, 1.0, range(2))
        assert gamma_max_j == 0.2 and 0 <= gamma <= 0.2
        assert not (drop & ~gate).any(), "a dropped position that is not gated"
        assert not drop[torch.isnan(h)].any(), "a general, first or padding token dropped"
        dropped += int(drop.sum())
    expected = 0.1 * gated * steps  # E[gamma_j] = gamma_max / 2
    sd = math.sqrt(expected * (1 - 0.1))
    assert abs(dropped - expected) < 4 * sd + 0.02 * expected


def test_masks_depend_on_global_rows_not_on_how_they_are_split():
    h, docs = packed_entropy(torch.Generator().manual_seed(2))
    method = TokenDropoutPlan("low", 0.5, "static", 0.5, 1.0, 0.0, "steps", seed=0)
    whole, _, _ = method.plan(h, docs, 7, 1.0, range(2))
    top, _, _ = method.plan(h[:1], docs[:1], 7, 1.0, range(0, 1))
    bottom, _, _ = method.plan(h[1:], docs[1:], 7, 1.0, range(1, 2))
    assert torch.equal(whole, torch.cat([top, bottom]))
    again, _, _ = method.plan(h, docs, 7, 1.0, range(2))
    other, _, _ = method.plan(h, docs, 8, 1.0, range(2))
    assert torch.equal(whole, again) and not torch.equal(whole, other)


def test_a_step_plan_counts_the_target_tokens_it_drops_on_the_device_it_is_given():
    h, docs = packed_entropy(torch.Generator().manual_seed(4))
    domain = torch.ones_like(docs)  # the loader's TARGET
    domain[1, 22:32], domain[1, 32:] = 0, -1  # row 1: a general document (GENERAL), then padding
    batch = {"entropy": h, "document_ids": docs, "domain": domain, "target_epoch": 1.0}
    method = TokenDropoutPlan("low", 0.5, "static", 0.5, 1.0, 0.0, "steps", seed=0)
    drop, noise, stats, counts = plan_perturbation(method, 0.0, batch, 3, range(2), 8, torch.device("cpu"))
    assert noise is None and stats["gamma_max"] == 0.5 and 0 < stats["gamma"] <= 0.5
    assert torch.equal(drop, method.plan(h, docs, 3, 1.0, range(2))[0])  # the same mask as the plan's
    assert counts.dtype == torch.long and counts.device == drop.device
    assert counts.tolist() == [int(drop[domain == 1].sum()), int((domain == 1).sum())] and counts[0] > 0
    _, _, _, counts = plan_perturbation(TokenDropoutPlan("low", 0.5, "none", 0.5, 1.0, 0.0, "steps", 0), 0.0, batch, 3,
                                        range(2), 8, torch.device("cpu"))
    assert counts.tolist() == [0, int((domain == 1).sum())]


def test_no_schedule_draws_nothing():
    h, docs = packed_entropy(torch.Generator().manual_seed(3))
    drop, gamma_max_j, gamma = TokenDropoutPlan("low", 0.5, "none", 0.1, 1.0, 0.0, "steps", 0).plan(h, docs, 5, 1.0, range(2))
    assert drop is None and gamma_max_j == gamma == 0.0


def test_dropped_embeddings_are_e_bar_exactly_and_the_rest_untouched():
    torch.manual_seed(0)
    model = qwen3(vocab_size=50, num_layers=1, num_heads=2, num_kv_heads=1, embed_dim=8, intermediate_dim=16,
                  max_seq_len=16, tie_word_embeddings=True)
    e_bar = mean_embedding(model.tok_embeddings.weight)
    torch.testing.assert_close(e_bar, model.tok_embeddings.weight.mean(0))
    tokens = torch.randint(0, 50, (2, 6))
    drop = torch.zeros(2, 6, dtype=torch.bool)
    drop[0, 2] = drop[1, 4] = True
    hook = EmbeddingHook(model.tok_embeddings)
    hook.set(lambda x: perturb_embeddings(x, drop, e_bar, None))
    out = model.tok_embeddings(tokens)
    assert torch.equal(out[drop], e_bar.expand(2, 8))
    assert torch.equal(out[~drop], model.tok_embeddings.weight[tokens][~drop])
    # The tied output projection still uses the real embedding matrix.
    hidden = torch.randn(2, 6, 8, generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close(model.output(hidden), hidden @ model.tok_embeddings.weight.T, atol=0, rtol=0)
    hook.set(None)
    assert torch.equal(model.tok_embeddings(tokens), model.tok_embeddings.weight[tokens])
    assert list(model.state_dict())[0] == "tok_embeddings.weight"


def test_neftune_draws_are_not_the_mask_draws():
    mask_draws = torch.rand(8, generator=row_generator(0, 1, 0))
    assert not torch.equal(mask_draws, torch.rand(8, generator=row_generator(0, 1, 0, stream="neftune")))
    assert torch.equal(mask_draws, torch.rand(8, generator=row_generator(0, 1, 0)))


def test_neftune_noise_scale_counts_real_tokens_only():
    valid = torch.tensor([[True] * 10 + [False] * 6, [True] * 16])
    noise = neftune_noise(valid, dim=32, alpha=5.0, generators=[row_generator(0, 1, r) for r in range(2)])
    assert noise[0, 10:].abs().max() == 0
    for r, length in [(0, 10), (1, 16)]:
        bound = 5.0 / math.sqrt(length * 32)
        assert noise[r, :length].abs().max() <= bound and noise[r, :length].abs().max() > 0.9 * bound


def test_hidden_dropout_only_in_training():
    torch.manual_seed(0)
    model = qwen3(vocab_size=50, num_layers=2, num_heads=2, num_kv_heads=1, embed_dim=8, intermediate_dim=16, max_seq_len=16)
    tokens = torch.randint(0, 50, (1, 6))
    reference = model.eval()(tokens)
    add_hidden_dropout(model, 0.5)
    assert torch.equal(model.eval()(tokens), reference)
    assert not torch.allclose(model.train()(tokens), reference)


def test_drop_mask_rows_use_their_own_generators():
    gate = torch.ones(2, 1000, dtype=torch.bool)
    mask = drop_mask(gate, 0.3, [row_generator(0, 0, 0), row_generator(0, 0, 1)])
    assert 0.25 < mask.float().mean() < 0.35 and not torch.equal(mask[0], mask[1])


def test_the_epoch_midpoint_is_half_way_where_the_realized_epoch_crosses_it():
    # A stream that realizes 0.07 target epochs a step (not the pre-run estimate): at the
    # batch whose target_epoch reaches the midpoint, gamma_max(j) is half its value.
    per_step, midpoint = 0.07, 2.0
    values = []
    for step in range(60):
        epoch = (step + 1) * per_step
        j0 = midpoint_step(midpoint, "epochs", step, epoch)
        values.append((epoch, gamma_max_at(step, 0.1, "sigmoid", 0.5, j0)))
    crossing = next(i for i, (epoch, _) in enumerate(values) if epoch >= midpoint)
    assert values[crossing - 1][1] < 0.05 <= values[crossing][1]
    # within one step: nearer to half than one step's change of the schedule
    assert values[crossing][1] - 0.05 < values[crossing][1] - values[crossing - 1][1]
    assert gamma_max_at(0, 0.1, "sigmoid", 0.02, midpoint_step(25, "epochs", 0, 0.0)) == 0.0


def evaluations(losses, steps_per_evaluation=10, epochs_per_evaluation=0.5):
    """(target_epoch, step, loss) of evaluations at a fixed cadence."""
    return [((k + 1) * epochs_per_evaluation, (k + 1) * steps_per_evaluation, loss) for k, loss in enumerate(losses)]


def test_auto_midpoint_fixes_j0_at_the_lowest_loss_once_it_stops_improving_for_patience_evaluations():
    turns_up = evaluations([3.0, 2.6, 2.4, 2.45, 2.5, 2.7])
    assert auto_midpoint(turns_up, patience=1, min_improvement=0.0) == (1.5, 30)  # at the 4th evaluation
    assert auto_midpoint(turns_up, patience=3, min_improvement=0.0) == (1.5, 30)  # at the 6th
    assert auto_midpoint(turns_up[:5], patience=3, min_improvement=0.0) is None  # only 2 without improvement yet
    assert auto_midpoint(turns_up, patience=4, min_improvement=0.0) is None
    # Patience counts evaluations in a row: an improvement in between starts the count again.
    dips = evaluations([3.0, 2.5, 2.6, 2.4, 2.45, 2.5])
    assert auto_midpoint(dips, patience=2, min_improvement=0.0) == (2.0, 40)
    assert auto_midpoint(dips[:4], patience=2, min_improvement=0.0) is None


def test_auto_midpoint_never_fixes_j0_at_a_loss_that_is_not_finite():
    # A NaN first loss compared as "not below" anything and stayed the lowest for good.
    assert auto_midpoint([(1.0, 1, NAN), (2.0, 2, 1.0), (3.0, 3, 1.1), (4.0, 4, 1.2)], 2, 0.0) == (2.0, 2)
    assert auto_midpoint([(1.0, 1, NAN), (2.0, 2, float("inf"))], 1, 0.0) is None  # nothing finite yet
    assert auto_midpoint([(1.0, 1, 2.0), (2.0, 2, NAN), (3.0, 3, 1.9)], 2, 0.0) is None  # NaN is no improvement,
    assert auto_midpoint([(1.0, 1, 2.0), (2.0, 2, NAN), (3.0, 3, 2.1)], 2, 0.0) == (1.0, 1)  # but counts for patience


def test_auto_midpoint_never_fixes_j0_while_the_loss_keeps_falling():
    falling = evaluations([3.0 * 0.99 ** k for k in range(200)])
    assert all(auto_midpoint(falling[:n], 1, 0.0) is None for n in range(len(falling) + 1))
    assert auto_midpoint(evaluations([2.0]), 1, 0.0) is None and auto_midpoint([], 1, 0.0) is None
    # With a 2% threshold, 1% and then 1.99% below the last improvement are none: j0 at the lowest.
    assert auto_midpoint(falling, 2, 0.02) == (1.5, 30)


def test_auto_midpoint_improvement_is_relative_to_the_last_improvement():
    # Each evaluation falls by 0.6%: below a 1% threshold one at a time, above it two together,
    # so a slow steady fall keeps counting as improvement; j0 is the lowest loss, not the last
    # evaluation that counted as an improvement.
    slow = evaluations([2.0, 2.0 * 0.994, 2.0 * 0.994 ** 2, 2.0 * 0.994 ** 3, 2.0 * 0.994 ** 4])
    assert auto_midpoint(slow, patience=2, min_improvement=0.01) is None
    plateau = evaluations([2.0, 1.8, 1.79, 1.795, 1.80])  # 1.79 is lower but not 1% lower than 1.8
    assert auto_midpoint(plateau, patience=3, min_improvement=0.01) == (1.5, 30)
    assert auto_midpoint(plateau, patience=3, min_improvement=0.0) is None  # 1.79 improved: 2 since
    # ties are no improvement, and j0 is the earliest of equal losses
    assert auto_midpoint(evaluations([2.0, 1.5, 1.5, 1.5]), patience=2, min_improvement=0.0) == (1.0, 20)


def test_auto_midpoint_is_fixed_once_later_evaluations_never_move_it():
    losses = [3.0, 2.5, 2.2, 2.25, 2.3, 1.0, 0.5]  # falls again after it was fixed at the 5th
    first = next(n for n in range(1, len(losses) + 1) if auto_midpoint(evaluations(losses[:n]), 2, 0.0))
    assert first == 5
    assert {auto_midpoint(evaluations(losses[:n]), 2, 0.0) for n in range(first, len(losses) + 1)} == {(1.5, 30)}


def test_a_midpoint_not_yet_fixed_keeps_gamma_max_at_zero_exactly():
    h, docs = packed_entropy(torch.Generator().manual_seed(3))
    for unit in ("epochs", "steps"):
        waiting = TokenDropoutPlan("low", 0.5, "sigmoid", 0.1, 10.0, None, unit, 0)
        for step in (0, 5, 10_000):
            assert waiting.plan(h, docs, step, 100.0, range(2)) == (None, 0.0, 0.0)
    assert gamma_max_at(10_000, 0.1, "sigmoid", 10.0, midpoint_step(None, "steps", 10_000, 1.0)) == 0.0
