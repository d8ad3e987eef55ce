"""``token_dropout.midpoint: auto``: the run watches its own validation loss and fixes j0 there.

The paper takes j0 of Eq. 7 from a baseline run's validation curve. Until j0 is fixed an
EntroDrop run with ``midpoint: auto`` trains exactly as that baseline (gamma_max(j) = 0), so the
watch reads each evaluation's all-token validation loss and fixes j0 at its lowest value once
``entrodrop.method.dropout.auto_midpoint`` says the loss has stopped improving. Every process
sees the same (all-reduced) loss, so every process fixes the same j0 at the same step.
"""

from dataclasses import replace
from typing import Any, Dict, List, Optional, Tuple

from torchtune import utils

from entrodrop.method.dropout import AUTO, TokenDropoutPlan, auto_midpoint

log = utils.get_logger("INFO")


class MidpointWatch:
    """The validation losses seen so far and the j0 they fixed (None until then).

    Args:
        patience (int): evaluations without improvement before j0 is fixed (``auto_patience``).
        min_improvement (float): the relative drop that counts as one (``auto_min_improvement``).

    j0 is ``{"target_epoch", "step", "fixed_at_step"}``: where the lowest loss was, and the
    evaluation that fixed it. ``state_dict`` holds what a resumed run needs to decide as the
    uninterrupted one does, under the recipe state's own keys (``val_losses``, ``j0``), the layout
    saved checkpoints have.

    Example:
        >>> watch = MidpointWatch(patience=2, min_improvement=0.0)
        >>> [watch.observe({"target_epoch": s / 10, "step": s, "val_loss": {"all": x}})
        ...  for s, x in [(3, 3.0), (6, 2.5), (9, 2.6), (12, 2.7)]][-1]
        {'target_epoch': 0.6, 'step': 6, 'fixed_at_step': 12}
    """

    def __init__(self, patience: int, min_improvement: float) -> None:
        self.patience, self.min_improvement = patience, min_improvement
        self.val_losses: List[Tuple[float, int, float]] = []  # (target_epoch, step, all-token loss), oldest first
        self.j0: Optional[Dict[str, Any]] = None

    @classmethod
    def from_config(cls, token_dropout) -> Optional["MidpointWatch"]:
        """The watch of a ``token_dropout`` config section with ``midpoint: auto``; None when the
        midpoint is a number (j0 given, nothing to watch; the auto keys are not read)."""
        if token_dropout.midpoint != AUTO:
            return None
        return cls(token_dropout.auto_patience, token_dropout.auto_min_improvement)

    def observe(self, record: Dict[str, Any]) -> Optional[Dict[str, Any]]:
        """Add an evaluation ``record`` (its ``target_epoch``, ``step`` and ``val_loss["all"]``);
        returns j0, fixed by this record or an earlier one, or None. Once fixed, j0 stays for the
        rest of the run and later records are not read (``auto_midpoint`` never moves it)."""
        if self.j0 is None:
            self.val_losses.append((record["target_epoch"], record["step"], record["val_loss"]["all"]))
            found = auto_midpoint(self.val_losses, self.patience, self.min_improvement)
            if found:
                self.j0 = {"target_epoch": found[0], "step": found[1], "fixed_at_step": record["step"]}
                utils.log_rank_zero(log, f"midpoint: auto fixed j0 at target epoch {found[0]:.2f} (step {found[1]}), "
                                         f"the lowest validation loss so far, after {self.patience} evaluations in a "
                                         f"row without a relative improvement above {self.min_improvement:g}; the "
                                         f"curriculum runs from step {record['step'] + 1}")
        return self.j0

    def apply(self, dropout: TokenDropoutPlan) -> TokenDropoutPlan:
        """``dropout`` with the fixed j0 as its midpoint, in its ``midpoint_unit``; unchanged (its
        midpoint None: gamma_max(j) = 0 exactly) while j0 is not fixed."""
        if self.j0 is None:
            return dropout
        return replace(dropout, midpoint=self.j0["target_epoch"] if dropout.midpoint_unit == "epochs"
                       else self.j0["step"])

    def state_dict(self) -> Dict[str, Any]:
        return {"val_losses": list(self.val_losses), "j0": self.j0}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        """Resume from ``state_dict()``'s keys; ``state`` may hold others (a whole recipe state)."""
        self.val_losses, self.j0 = list(state["val_losses"]), state["j0"]


def midpoint_state(watch: Optional[MidpointWatch]) -> Dict[str, Any]:
    """The recipe-state entries of ``midpoint: auto``: the watch's ``state_dict``, or, for a run
    with a number for its midpoint (no watch), the empty ones every checkpoint has held.

    Example:
        >>> midpoint_state(None)
        {'val_losses': [], 'j0': None}
    """
    return watch.state_dict() if watch else {"val_losses": [], "j0": None}
