"""When a run evaluates (entrodrop.train.cadence): at each crossed multiple of every_n_epochs, every
n steps, and at the last step."""

from entrodrop.train.cadence import evaluation_due


def due_steps(every_n_steps, every_n_epochs, num_steps=30):
    """The steps a 30-step run evaluates after, its target epoch growing 0.3 a step (9 epochs)."""
    def epoch(step):
        return step * 3 / 10  # exact at whole epochs: 10 / 10, 20 * 3 / 10...

    return [s for s in range(1, num_steps + 1)
            if evaluation_due(s, num_steps, epoch(s - 1), epoch(s), every_n_steps, every_n_epochs)]


def test_evaluation_is_due_at_each_crossed_multiple_of_every_n_epochs_and_the_last_step():
    # Epoch 1 is crossed at step 4 (1.2), 2 at 7 (2.1), 3 at 10 (3.0 exactly), 4 at 14 (4.2)...
    assert due_steps(None, 1) == [4, 7, 10, 14, 17, 20, 24, 27, 30]
    assert due_steps(None, 2) == [7, 14, 20, 27, 30]  # epochs 2, 4, 6, 8, then the last step
    assert due_steps(None, 4) == [14, 27, 30]
    assert due_steps(None, None) == [30]


def test_evaluation_is_due_every_n_steps_alone_or_with_epochs():
    assert due_steps(8, None) == [8, 16, 24, 30]
    assert due_steps(25, 4) == [14, 25, 27, 30]
    assert due_steps(1, None) == list(range(1, 31))
