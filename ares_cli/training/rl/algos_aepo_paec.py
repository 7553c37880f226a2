"""AEPO (ARES) and PAEC through the same hooks as the baselines (see :mod:`.algos`).

AEPO per step (ARES sec. 3.2, algorithm 1): from the no-grad pass's full-vocabulary entropy, window
entropy -> batch threshold tau (global) -> HWE mask and N_HE -> online bucket of each prompt from its
group's pass count -> hierarchical reward (after bucketing; :func:`aepo_rewards`) and optionally the
token bonus psi -> KL-loss weights kappa_d * beta_d * rho on the relaxed tokens (every token of a flagged
window, ``aepo.kl_scope="window"``, or only its start, ``"start"``) -> after the step, each bucket's kappa_d
is driven by the KL of its *non-relaxed* tokens (old policy vs reference, global over ranks). Ablations
(ARES table 5): ``aepo.reward_shaping=false`` keeps the accuracy reward; ``aepo.dynamic_kl=false`` uses
the uniform weight ``kl_init`` on every token and never moves kappa_d.

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

from ares_cli.training.rl.algos import Algorithm, group_correct


class AEPO(Algorithm):
    reads_old_stats = True  # prepare reads the old policy's entropies and log-probs

    def __init__(self, cfg, reduce, gather=None):
        from ares_cli.algorithms.aepo_kl import kl_controller_from_config
        from ares_cli.algorithms.aepo_reward import target_tracker_from_config
        from ares_cli.algorithms.controllers import ThresholdEMA

        super().__init__(cfg, reduce, gather)
        a = cfg.aepo
        self.tracker = target_tracker_from_config(a, all_reduce=reduce)
        self.kl_ctrl = kl_controller_from_config(a, all_reduce=reduce)
        self.tau_ema = ThresholdEMA(a.threshold_ema_decay) if a.threshold_mode == "ema" else None
        self._trigger_ids: set[int] | None = None
        self._det = None

    def controllers(self):
        out = {"aepo_kl": self.kl_ctrl, "aepo_target": self.tracker}
        return out | ({"aepo_threshold": self.tau_ema} if self.tau_ema is not None else {})

    def _trigger(self, batch, ids):
        from ares_cli.algorithms.aepo import trigger_mask, trigger_token_ids

        if not self.cfg.aepo.use_trigger_vocab:
            return None
        if self._trigger_ids is None:
            self._trigger_ids = trigger_token_ids(batch.meta["tokenizer"], self.cfg.aepo.trigger_words)
        return trigger_mask(ids, self._trigger_ids)

    def prepare(self, batch):
        from dataclasses import replace

        from ares_cli.algorithms.aepo import detect_hwe
        from ares_cli.algorithms.buckets import bucket_ids
        from ares_cli.training.rl import trajectory

        a, mask = self.cfg.aepo, batch.response_mask
        # per-trajectory statistics (threshold quantiles, windows, N_HE, length) over whole trajectories: a
        # branch row's shared prefix counts; the token masks are then taken on the row's trained positions
        ent, traj_mask = trajectory.view(batch, batch.tok["old_entropy"])
        ids, _ = trajectory.view(batch, batch.response_ids)
        full = detect_hwe(ent, traj_mask, a, ema=self.tau_ema, trigger=self._trigger(batch, ids),
                          all_reduce=self.reduce, all_gather=self.gather)  # fmt: skip
        det = replace(full, window_entropy=trajectory.own(batch, full.window_entropy),
                      hwe=trajectory.own(batch, full.hwe), covered=trajectory.own(batch, full.covered))  # fmt: skip
        n_correct, size = group_correct(batch)
        batch.seq["bucket"] = bucket_ids(n_correct, size, a.easy_pass_frac, a.hard_pass_frac)
        batch.seq["n_he"] = det.n_he
        batch.seq["trajectory_len"] = traj_mask.sum(1)
        batch.tok["hwe"] = det.hwe.float()
        # the KL-relaxed tokens (eq. 1's W^valid): every token of a flagged window, or only its start
        batch.tok["kl_relaxed"] = (det.covered if a.kl_scope == "window" else det.hwe).float()
        self._det, self._trajectory = det, (full.hwe, traj_mask)
        n_tok = float(mask.sum().clamp(min=1))
        return {"aepo/threshold": float(det.threshold), "aepo/threshold_batch": float(det.batch_threshold),
                "aepo/relaxed_frac": float(batch.tok["kl_relaxed"].sum()) / n_tok}  # fmt: skip

    def rewards(self, batch):
        from ares_cli.algorithms.aepo_reward import aepo_rewards, token_bonus

        a, det, buckets = self.cfg.aepo, self._det, batch.seq["bucket"]
        base = batch.seq["base_reward"]
        if not a.reward_shaping:  # ablation: plain accuracy reward, the target tracker never moves
            self._shaping = None
            return base, None, {"aepo/shaping_abs_mean": 0.0}
        out = aepo_rewards(base, batch.seq["correct"].bool(), det.n_he, buckets, self.tracker, a,
                           groups=batch.group, lengths=batch.seq["trajectory_len"])  # fmt: skip
        bonus = None
        if a.token_bonus:
            bonus = token_bonus(det.window_entropy, det.hwe, batch.response_mask, buckets, out.lam,
                                det.threshold, phi=a.token_bonus_phi, baseline=a.token_bonus_baseline)  # fmt: skip
        self._shaping = out
        shift = (out.reward - base.float()).abs()
        return out.reward, bonus, {"aepo/shaping_abs_mean": float(shift.mean()) if len(shift) else 0.0,
                                   **out.metrics}  # fmt: skip

    def kl_weights(self, batch):
        from ares_cli.algorithms.aepo_kl import aepo_kl_coef

        return aepo_kl_coef(batch.tok["kl_relaxed"], batch.response_mask, batch.seq["bucket"], self.kl_ctrl.kappa,
                            self.cfg.aepo)  # fmt: skip

    def after_step(self, batch):
        from ares_cli.algorithms.aepo_kl import aepo_step_metrics, nonwindow_kl_stats
        from ares_cli.algorithms.kl import kl_estimate

        kl_ctrl, dynamic = None, self.cfg.aepo.dynamic_kl
        if "ref_logprob" in batch.tok:  # measured with or without the controller (the ablation logs it too)
            kl = self.cfg.kl
            kld = kl_estimate(batch.tok["old_logprob"], batch.tok["ref_logprob"], kind=kl.estimator, clamp=kl.clamp,
                              log_ratio_clamp=kl.log_ratio_clamp)  # fmt: skip
            local = nonwindow_kl_stats(kld, batch.tok["kl_relaxed"], batch.response_mask, batch.seq["bucket"],
                                       self.cfg.aepo.kl_ctrl_signal)  # fmt: skip
            if dynamic:
                self.kl_ctrl.update(*local)  # the controller all-reduces the local sums itself
            kl_ctrl = tuple(self.reduce(t.clone()) for t in local)
        s = self._shaping  # None without reward shaping: no target / lambda metrics
        moments, target, lam = (s.moments, s.target, s.lam) if s is not None else (None, None, None)
        hwe, mask = self._trajectory  # N_HE and lengths per trajectory, as the reward saw them
        return aepo_step_metrics(threshold=self._det.threshold, hwe=hwe, mask=mask,
                                 buckets=batch.seq["bucket"], moments=moments, target=target, lam=lam,
                                 kappa=self.kl_ctrl.kappa if dynamic else None, kl_ctrl=kl_ctrl,
                                 batch_threshold_value=self._det.batch_threshold)  # fmt: skip


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
        stats = [
            trajectory.view(batch, batch.tok[f"old_{k}"])[0]
            for k in ("nucleus_entropy", "nucleus_size", "top2_gap")
        ]
        _, traj_mask = trajectory.view(batch, mask)
        scores = scores_from_stats(*stats, p.beta, p.score_eps)
        # the soft mask's threshold is the quantile of the whole trajectory's scores (eq. 10; a branch row's
        # prefix counts); the mask itself and H_bar use the row's trained positions only
        m = trajectory.own(batch, position_mask(scores.score, traj_mask, p))
        batch.tok["paec_mask"] = m
        num, den = masked_entropy_sums(batch.tok["old_nucleus_entropy"], m, mask)
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

        num, den = masked_entropy_sums(mb.tok["old_nucleus_entropy"], mb.tok["paec_mask"], mb.response_mask)
        total = self.reduce(torch.stack([num, den]).to(torch.float64))
        self._global = (float(total[0]), float(total[1]))
        self._value = self._step_value if self.cfg.paec.hbar_scope == "step" else None

    def extra_loss(self, micro, stats):
        from ares_cli.algorithms.paec import paec_loss

        out = paec_loss(stats.nucleus_entropy, micro.tok["paec_mask"], micro.response_mask, self.cfg.paec,
                        h0=self.anchor.h0, global_num=self._global[0], global_den=self._global[1],
                        value=self._value)  # fmt: skip
        return out.loss, out.metrics
