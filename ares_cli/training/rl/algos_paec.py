"""PAEC through the same hooks as the baselines (see :mod:`.algos`).

PAEC per step (PAEC sec. 3, algorithm 1): from the same no-grad pass's nucleus statistics, scores s
(detached) -> per-response soft mask m -> anchor H0 updated with this step's masked entropy during the
first K steps -> per optimiser step the extra loss -alpha*H_bar + lambda*[rho_min*H0 - H_bar]_+^2 whose
*value* (and so the penalty gate) uses the no-grad pass's global sums over the whole step
(``paec.hbar_scope="step"``, algorithm 1 line 20) or over the optimiser mini-batch (``"minibatch"``), and
whose gradient flows through the loss forward's H' (the micro-batch share of the mini-batch's global
sum, so micro-batch and rank splits add up).
``paec.soft_mask=false`` (PAEC table 2) sets m = 1 on every response token.
"""

from __future__ import annotations

import torch

from ares_cli.training.rl.algos import Algorithm


class PAEC(Algorithm):
    reads_old_stats = True  # prepare and minibatch_start read the old nucleus entropies

    def __init__(self, cfg, reduce, gather=None):
        from ares_cli.algorithms.controllers import EntropyAnchor

        super().__init__(cfg, reduce, gather)
        p = cfg.paec
        self.anchor = EntropyAnchor(p.anchor_steps, eps=p.mask_eps, all_reduce=reduce)
        self._global, self._step_value, self._value = (0.0, 0.0), 0.0, None

    @property
    def nucleus(self):
        return self.cfg.paec.top_p, self.cfg.paec.top_k

    def rollout_stats(self):
        return ("logprob", "entropy", "nucleus_entropy", "nucleus_size", "top2_gap")

    def train_stats(self):
        return ("logprob", "entropy", "nucleus_entropy")

    def controllers(self):
        return {"paec_anchor": self.anchor}

    def prepare(self, batch):
        from ares_cli.algorithms.paec import masked_entropy_sums, position_mask, scores_from_stats
        from ares_cli.training.rl import trajectory

        p, mask = self.cfg.paec, batch.response_mask
        old = batch.tok
        stats = [
            trajectory.view(batch, values)[0]
            for values in (old.old_nucleus_entropy, old.old_nucleus_size, old.old_top2_gap)
        ]
        _, traj_mask = trajectory.view(batch, mask)
        scores = scores_from_stats(*stats, p.beta, p.score_eps)
        # the soft mask's threshold is the quantile of the whole trajectory's scores (eq. 10; a branch row's
        # prefix counts); the mask itself and H_bar use the row's trained positions only
        m = trajectory.own(batch, position_mask(scores.score, traj_mask, p))
        batch.tok.paec_mask = m
        num, den = masked_entropy_sums(batch.tok.old_nucleus_entropy, m, mask)
        step = self.reduce(torch.stack([num, den]).to(torch.float64))
        self._step_value = float(step[0]) / (float(step[1]) + p.mask_eps)
        h0 = self.anchor.update(num, den)
        return {
            "paec/h0": h0,
            "paec/h_bar_step": self._step_value,
            "paec/score_mean": float(
                (trajectory.own(batch, scores.score) * mask).sum() / mask.sum().clamp(min=1)
            ),
        }

    def minibatch_start(self, mb):
        from ares_cli.algorithms.paec import masked_entropy_sums

        num, den = masked_entropy_sums(mb.tok.old_nucleus_entropy, mb.tok.paec_mask, mb.response_mask)
        total = self.reduce(torch.stack([num, den]).to(torch.float64))
        self._global = (float(total[0]), float(total[1]))
        self._value = self._step_value if self.cfg.paec.hbar_scope == "step" else None

    def extra_loss(self, micro, stats):
        from ares_cli.algorithms.paec import paec_loss

        out = paec_loss(stats.nucleus_entropy, micro.tok.paec_mask, micro.response_mask, self.cfg.paec,
                        h0=self.anchor.h0, global_num=self._global[0], global_den=self._global[1],
                        value=self._value)  # fmt: skip
        return out.loss, out.metrics
