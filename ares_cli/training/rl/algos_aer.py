"""AER (PAEC's strongest baseline, reconstructed: :mod:`ares_cli.algorithms.aer`) through the trainer's hooks.

Per step: from the no-grad pass's full-vocabulary entropy and the groups' pass rates -> per-response weights
w_i (difficulty-aware allocation) -> during the first K steps, H0 from the pre-update entropy (all ranks)
-> each optimiser step adds -alpha * sum(w H) / N with gradient through the loss forward's entropy (alpha
from the previous step) -> after the step, alpha moves towards H* = tau * H0 from this step's entropy.
With ``aer.cadence="minibatch"`` alpha moves at the start of every optimiser step from that mini-batch's
pre-update entropy instead. The controller (alpha, H0) is global across ranks and saved in checkpoints.
"""

from __future__ import annotations

import warnings

import torch

from ares_cli.training.rl.algos import Algorithm, group_correct


class AER(Algorithm):
    reads_old_stats = True  # prepare, minibatch_start and after_step read the old entropies

    def __init__(self, cfg, reduce, gather=None):
        from ares_cli.algorithms.controllers import AERController

        super().__init__(cfg, reduce, gather)
        self.ctrl = AERController(cfg.aer, all_reduce=reduce)
        self._norm, self._alpha = 1.0, self.ctrl.alpha
        if cfg.filter.mode == "filter" and cfg.aer.allocation == "gate":
            warnings.warn("aer with dynamic sampling: all-wrong groups are dropped, so only prompts with a few "
                          "correct answers get the entropy bonus (shared/notes/aer.md, question 3)", stacklevel=2)  # fmt: skip

    @property
    def entropy_grad(self) -> bool:
        return True

    def controllers(self):
        return {"aer": self.ctrl}

    def _signal_sums(self, entropy, mask, weights):
        from ares_cli.algorithms.aer import entropy_sums

        return entropy_sums(entropy, mask, weights if self.cfg.aer.signal == "gated" else None)

    def prepare(self, batch):
        from ares_cli.algorithms.aer import sample_weights

        n_correct, size = group_correct(batch)
        w = sample_weights(n_correct.double() / size.clamp(min=1).double(), self.cfg.aer)
        batch.seq.aer_weight = w.to(batch.response_mask.device)
        h0 = self.ctrl.anchor(*self._signal_sums(batch.tok.old_entropy, batch.response_mask, w))
        hard = self.reduce(torch.tensor([float((w > 0).sum()), float(len(w))], dtype=torch.float64))
        return {"aer/h0": float("nan") if h0 is None else h0,
                "aer/target": float("nan") if self.ctrl.target is None else self.ctrl.target,
                "aer/hard_frac": float(hard[0] / hard[1].clamp(min=1))}  # fmt: skip

    def minibatch_start(self, mb):
        from ares_cli.algorithms.aer import entropy_sums

        a, w = self.cfg.aer, mb.seq.aer_weight
        if a.cadence == "minibatch":
            self.ctrl.update(*self._signal_sums(mb.tok.old_entropy, mb.response_mask, w))
        _, count = entropy_sums(mb.tok.old_entropy, mb.response_mask, w if a.normaliser == "gated" else None)
        self._norm = float(self.reduce(count.reshape(1).clone())[0])
        self._alpha = self.ctrl.alpha

    def extra_loss(self, micro, stats):
        from ares_cli.algorithms.aer import aer_loss

        mask, w = micro.response_mask, micro.seq.aer_weight
        loss = aer_loss(stats.entropy, mask, w, self._alpha, self._norm)
        weighted = float((w[:, None] * stats.entropy.detach() * mask).sum() / mask.sum().clamp(min=1))
        return loss, {"aer/alpha": self._alpha, "aer/weighted_entropy": weighted}

    def after_step(self, batch):
        if self.cfg.aer.cadence == "step":
            sums = self._signal_sums(batch.tok.old_entropy, batch.response_mask, batch.seq.aer_weight)
            self.ctrl.update(*sums)
        entropy = self.ctrl.last_entropy
        return {
            "aer/alpha_next": self.ctrl.alpha,
            "aer/entropy": float("nan") if entropy is None else entropy,
        }
